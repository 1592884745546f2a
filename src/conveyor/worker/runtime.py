"""The worker: wait for jobs, claim them in batches, hand them to its job
pool (pool.py: the runners, acknowledgements, giving back at shutdown), and
stop without losing any. A heartbeat thread renews leases and reaps expired
ones. A worker may serve several queues (queues.py): a pool, heartbeat and
courier each, one claim loop and one idle wait for all.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
import signal
import socket
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio

from conveyor.client.aio import AsyncQueue
from conveyor.client.connection import SOCKET_TIMEOUT, resolve_url, shown_url, wire_endpoint
from conveyor.client.pipelines import PIPELINE_TASK
from conveyor.client.sync import connect as connect_sync
from conveyor.client.tasks import Task, Tasks
from conveyor.client.transport import SyncRunner
from conveyor.client.wire import SyncWire
from conveyor.errors import ConfigurationError, ConnectionLostError, ProtocolVersionError
from conveyor.hooks import Hook, Hooks
from conveyor.hooks import call as call_hooks
from conveyor.protocol import ops
from conveyor.protocol.keys import PROTOCOL_VERSION
from conveyor.timeutil import to_ms
from conveyor.worker import job_lines
from conveyor.worker.claiming import ClaimLoop, Rider
from conveyor.worker.courier import Courier
from conveyor.worker.gc_tuning import young_threshold
from conveyor.worker.heartbeat import Heartbeat
from conveyor.worker.metrics import MetricsRecorder
from conveyor.worker.pipelines import drive_pipeline
from conveyor.worker.pool import JobPool, log_failure
from conveyor.worker.processes import PoolSettings
from conveyor.worker.queues import Lane, Turns, check_queues
from conveyor.worker.roll_call import RollCall
from conveyor.worker.tuning import AutoConcurrency, Controller
from conveyor.worker.usage import Usage, process_usage
from conveyor.worker.waiting import Blocker

log = logging.getLogger("conveyor.worker")


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerSettings:
    """How a worker runs. Times in seconds."""

    concurrency: int = 10
    failures: bool = False  # run the failure lane's jobs (the failure handlers)
    lease: float = 30.0
    heartbeat_interval: float | None = None  # default: lease / 3
    grace: float = 30.0  # SIGTERM: how long running jobs may finish
    burst: bool = False  # drain the queue, then exit
    metrics: bool = True  # send run and wait times to the metrics history (conveyor.metrics)
    idle_wait: float = 5.0  # longest single block on Redis when idle; burst's horizon
    promote_batch: int = 1000
    # process execution (README, "Execution"): where sync handlers without an
    # executor of their own run ("thread" or "process"), and the child pool
    executor: str = "thread"
    processes: int | None = None  # children; default: the CPU count
    max_tasks_per_child: int | None = None  # recycle a child after this many jobs
    max_memory_per_child: int | None = None  # bytes: recycle after a job took its RSS past it
    # suspects (jobs whose last run ended without an outcome) run at once, each in a child
    # process of its own (worker/suspects.py): a crash costs a slot each, not a backlog
    suspects: int = 4

    # --concurrency auto (worker/tuning.py): the limit follows throughput, from
    # min_concurrency up to max_concurrency (default: the larger of
    # `concurrency` and 4 per CPU)
    auto_concurrency: bool = False
    min_concurrency: int = 1
    max_concurrency: int | None = None
    # several queues: none for strict order, else one weight per queue
    # (claims shared in proportion while every queue has jobs)
    weights: tuple[int, ...] = ()
    # while it runs, Python's young collections wait for this many new objects
    # (the interpreter's default is 700; None leaves it alone): worker/gc_tuning.py
    gc_threshold: int | None = 10_000
    # Redis unreachable at start: retry for ever (None: right for a fleet), or
    # give up with ConnectionLostError after this many seconds
    wait_for_redis: float | None = None

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ConfigurationError("concurrency must be at least 1")
        if not 1 <= self.min_concurrency <= self.most_concurrency:
            raise ConfigurationError("need 1 <= min_concurrency <= max_concurrency")
        if self.executor not in ("thread", "process"):
            raise ConfigurationError("executor must be 'thread' or 'process'")
        for name in (
            "processes", "max_tasks_per_child", "max_memory_per_child", "gc_threshold", "suspects"
        ):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigurationError(f"{name} must be at least 1")
        if any(not isinstance(w, int) or w < 1 for w in self.weights):
            raise ConfigurationError(f"queue weights must be whole numbers >= 1: {self.weights}")
        if self.lease < 0.2:
            raise ConfigurationError("lease must be at least 0.2 s")
        if self.wait_for_redis is not None and not self.wait_for_redis > 0:
            raise ConfigurationError("wait_for_redis must be > 0 s")

    @property
    def most_concurrency(self) -> int:
        """The most jobs this worker ever runs at once."""
        if not self.auto_concurrency:
            return self.concurrency
        return self.max_concurrency or max(self.concurrency, 4 * (os.cpu_count() or 1))

    @property
    def beat_every(self) -> float:
        return self.heartbeat_interval or self.lease / 3


class Worker(ClaimLoop):
    """Runs the handlers of `tasks` for jobs of its queue; given the Tasks of
    several queues, serves them in order (strict, or by settings.weights),
    each task only on its own queue."""

    def __init__(
        self,
        tasks: Tasks | Sequence[Tasks],
        *,
        url: str | None = None,
        settings: WorkerSettings | None = None,
        hooks: Sequence[Hook] = (),
    ) -> None:
        self.queues = (tasks,) if isinstance(tasks, Tasks) else tuple(tasks)
        self.settings = settings or WorkerSettings()
        self._extra_hooks = Hooks(hooks).hooks  # besides those of tasks.settings
        self.url = resolve_url(url or next((t.url for t in self.queues if t.url), None))
        check_queues(self.queues, self.settings.weights, self.url)
        self.tasks = self.queues[0]  # the first (or only) queue's
        self.id = f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"
        self._started = time.time()
        self._lanes: list[Lane] = []
        self._jobs: JobPool | None = None  # the first (or only) queue's, as tests read it
        self._stopping = False
        self._stepped_over = False  # claims left suspects ready (claiming.py)
        self._quiet = False
        self._usage = Usage()
        self._hard_stop = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._wait_task: asyncio.Task[Any] | None = None
        self._wake_task: asyncio.Future[None] | None = None
        self._parked = False  # the claim loop waits for slots (_wait_for_slots)
        self._slot_turns = 1  # claims in flight at once (ClaimLoop._measure_turns)
        self._claiming = False  # the claim loop waits for its own claim's reply
        self._claims_out = 0  # claims in flight on the queue's connection (ClaimLoop)
        self._riding = 0  # the jobs they asked for
        self._rode: deque[tuple[ops.ClaimReply, int]] = deque()  # rides' replies, for the loop
        self._auto = self._auto_concurrency()
        sizes = [t.size for tasks in self.queues for t in self._handlers(tasks).values()]
        self._largest = max([1, *sizes])
        self._side_tasks: set[asyncio.Future[Any]] = set()

    # --- public ----------------------------------------------------------------

    @property
    def concurrency(self) -> int:
        """The most jobs it may run at once now (`--concurrency auto` moves it)."""
        return self._capacity()

    @property
    def processed(self) -> int:
        """Jobs completed by this worker."""
        return sum(lane.jobs.processed for lane in self._lanes)

    @property
    def failed(self) -> int:
        """Jobs this worker failed for good (retries not counted)."""
        return sum(lane.jobs.failed for lane in self._lanes)

    def run_sync(self) -> None:
        """Run until stopped (SIGTERM / SIGINT), or drained with burst."""
        asyncio.run(self.run())

    def stop(self) -> None:
        """Stop claiming; running jobs get `grace` seconds. A second call
        stops at once, putting unfinished jobs back."""
        if self._stopping:
            self._hard_stop.set()
            return
        log.info("worker %s stopping (again to stop now)", self.id)
        self._stopping = True
        self._slot_freed.set()
        if self._wait_task is not None:
            self._wake_task = asyncio.ensure_future(self._wake_self())

    async def _wake_self(self) -> None:
        """End our blocking wait by writing to our own wake key."""
        try:
            await self._queue.client.zadd(self._queue.core.keys.wake(self.id), {"stop": 0})
        except redis.RedisError:  # Redis away: the wait ends by its timeout
            log.debug("could not wake the blocked wait")

    async def run(self) -> None:
        self._lanes = [self._open_lane(tasks) for tasks in self.queues]
        first = self._lanes[0]
        self._turns = Turns(self._lanes, self.settings.weights, self.id)
        self._queue = first.queue  # its wake key ends the idle wait (stop)
        self._jobs = first.jobs
        # on a cluster, every connection follows the queue's slot (queue.route);
        # several queues share it (check_queues), so one blocking wait serves all
        route = first.queue.route
        self._blocker = Blocker(
            self.url,
            wire_endpoint(self.url, route),
            self.settings.idle_wait + SOCKET_TIMEOUT,
            route=route,
        )
        loop = asyncio.get_running_loop()
        self._install_signals(loop)
        with young_threshold(self.settings.gc_threshold):
            await self._run_lanes(loop)

    async def _run_lanes(self, loop: asyncio.AbstractEventLoop) -> None:
        first = self._lanes[0]
        try:
            for lane in self._lanes:
                await self._connect(lane.queue, lane.tasks)
            for lane in self._lanes:
                call_hooks(lane.hooks.worker_start, self.id, lane.queue.name)
                lane.start()
            if len(self._lanes) == 1:
                await self._measure_turns()
                first.jobs.ride_with(Rider(self))
            await self._serve()
        finally:
            for lane in self._lanes:
                await lane.close(self.id)
            self._remove_signals(loop)
            await self._blocker.close()
            for lane in self._lanes:
                call_hooks(lane.hooks.worker_stop, self.id, lane.queue.name)

    def _open_lane(self, tasks: Tasks) -> Lane:
        """The parts that serve one queue (connections open on first use)."""
        queue = AsyncQueue(
            tasks.queue_name, url=self.url, settings=tasks.settings, failures=self.settings.failures
        )
        sync_client = connect_sync(self.url, route=queue.route)
        endpoint = wire_endpoint(self.url, queue.route)
        recorder = MetricsRecorder(queue.core) if self.settings.metrics else None
        own: list[Hook] = [] if recorder is None else [recorder]
        lines = job_lines.job_lines()  # by the log level
        if lines is not None:
            own.append(lines)
        hooks = Hooks((*tasks.settings.hooks, *self._extra_hooks, *own))
        courier = None
        if not self.settings.failures:  # a failure lane's jobs have no parents
            courier = Courier(
                queue.name, url=self.url, settings=tasks.settings,
                interval=self.settings.beat_every,
            )  # fmt: skip
        handlers = self._handlers(tasks)
        self._say_batches_stay(queue.name, handlers)
        jobs = JobPool(
            queue,
            worker_id=self.id,
            handlers=handlers,
            concurrency=self.settings.most_concurrency,
            lease=self.settings.lease,
            freed=self._slot_freed,
            hooks=hooks,
            processes=self._pool_settings(),
            suspects=self.settings.suspects,
            capacity=self._capacity if len(self.queues) == 1 else self._capacity_beside(queue.name),
            on_handed_off=None if courier is None else courier.nudge,
            on_suspect_done=self._suspect_done,
        )
        beat_wire = None if endpoint is None else SyncWire(endpoint)
        beat_runner = SyncRunner(sync_client, queue.core.scripts, beat_wire)
        named = sorted(n for n in handlers if n != PIPELINE_TASK)
        roll_call = RollCall(
            lambda: self._info(queue.name, named, jobs), queue.core.keys.worker(self.id)
        )
        heartbeat = self._heartbeat(beat_runner, queue, roll_call, hooks, jobs, recorder, courier)
        return Lane(
            tasks=tasks, queue=queue, jobs=jobs, hooks=hooks, heartbeat=heartbeat, courier=courier,
            recorder=recorder, sync_client=sync_client, beat_wire=beat_wire, roll_call=roll_call,
        )  # fmt: skip

    def _say_batches_stay(self, queue: str, handlers: dict[str, Task[Any, Any]]) -> None:
        """Sync batch tasks run in threads whatever the worker's executor: a
        batch call is not one job that a child could run and be killed for."""
        if self.settings.executor != "process":
            return
        names = sorted(n for n, t in handlers.items() if t.batch_size and not t.is_async)
        if names:
            log.warning(
                "queue %r: batch task(s) %s run in the worker's threads "
                "(--executor process does not apply to batch tasks)",
                queue, ", ".join(repr(n) for n in names),
            )  # fmt: skip

    def _capacity_beside(self, name: str) -> Callable[[], int]:
        """Several queues: the capacity a queue's pool may fill, the worker's
        less what the other queues' held jobs take (one budget for all)."""

        def capacity() -> int:
            others = sum(lane.jobs.load for lane in self._lanes if lane.queue.name != name)
            return self._capacity() - others

        return capacity

    # --- set-up ------------------------------------------------------------------

    def _auto_concurrency(self) -> AutoConcurrency | None:
        s = self.settings
        if not s.auto_concurrency:
            return None
        controller = Controller(low=s.min_concurrency, high=s.most_concurrency)
        return AutoConcurrency(
            controller, lambda: self._in_flight, ended=lambda: self.processed + self.failed
        )

    def _pool_settings(self) -> PoolSettings:
        s = self.settings
        return PoolSettings(
            size=s.processes or os.cpu_count() or 1,
            max_tasks_per_child=s.max_tasks_per_child,
            max_memory_per_child=s.max_memory_per_child,
            runs_sync=s.executor == "process",
        )

    async def _connect(self, queue: AsyncQueue, tasks: Tasks) -> None:
        """Check the server and register; while Redis cannot be reached, retry
        (backing off to 5 s) and say so: at once, then every 30 s; give up
        after `wait_for_redis` s when set."""
        delay, began, said = 0.1, time.monotonic(), -math.inf
        limit = self.settings.wait_for_redis
        while True:
            try:
                await queue.check()
                await self._register_failure_tasks(queue, tasks)
                if said > -math.inf:
                    log.warning("reached Redis at %s", shown_url(self.url))
                return
            except ProtocolVersionError as exc:
                # an older queue may be being migrated (§10): start once it is ours
                if self._stopping or not exc.found.isdigit() or int(exc.found) > PROTOCOL_VERSION:
                    raise
                log.warning("%s; waiting %.1f s", exc, delay)
            except ConnectionLostError as exc:
                waited = time.monotonic() - began
                if self._stopping:
                    raise
                if limit is not None and waited >= limit:
                    detail = str(exc).removeprefix("cannot reach Redis: ")
                    raise ConnectionLostError(
                        f"cannot reach Redis at {shown_url(self.url)} within {limit:g} s: {detail}"
                    ) from exc
                if waited - said >= 30:
                    said = waited
                    log.warning(
                        "cannot reach Redis at %s (%s): the worker keeps trying %s",
                        shown_url(self.url), exc,
                        "until it answers" if limit is None else f"for {limit:g} s",
                    )  # fmt: skip
            await asyncio.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 5.0)

    async def _register_failure_tasks(self, queue: AsyncQueue, tasks: Tasks) -> None:
        """Tell the scripts which tasks have a failure handler (see finish.lua)."""
        names = sorted(tasks.failure_handlers)
        if names and not self.settings.failures:
            await queue.client.sadd(queue.core.keys.failure_tasks, *names)

    def _handlers(self, tasks: Tasks) -> dict[str, Task[Any, Any]]:
        """The handlers run for a queue: its tasks, or their failure handlers."""
        if self.settings.failures:
            return tasks.failure_handlers
        # every worker can drive the pipelines enqueued in its queue
        driver: Task[Any, Any] = Task(PIPELINE_TASK, drive_pipeline, tasks)
        return {PIPELINE_TASK: driver, **tasks.handlers}

    def _heartbeat(
        self,
        runner: SyncRunner,
        queue: AsyncQueue,
        roll_call: RollCall,
        hooks: Hooks,
        jobs: JobPool,
        recorder: MetricsRecorder | None,
        courier: Courier | None,
    ) -> Heartbeat:
        loop = asyncio.get_running_loop()
        stalled = hooks.on_stalled
        return Heartbeat(
            runner=runner,
            core=queue.core,
            worker_id=self.id,
            lease_ms=to_ms(self.settings.lease),
            interval=self.settings.beat_every,
            info=roll_call.for_beat,
            leases=jobs.leases,
            on_lost=lambda ids: _call_soon(loop, jobs.lose, ids),
            on_aborted=lambda ids: _call_soon(loop, jobs.abort, ids),
            on_reaped=(
                (lambda r, f: call_hooks(stalled, recovered=r, failed=f, queue=queue.name))
                if stalled
                else None
            ),
            after_beat=None if recorder is None else recorder.flush,
            on_handed_off=None if courier is None else courier.nudge,  # a final stall's hand-off
            on_commands=lambda commands: _call_soon(loop, self.obey, commands),
        )

    def _info(self, queue: str, handlers: list[str], jobs: JobPool) -> dict[str, Any]:
        """This worker's entry in a queue's roll call (protocol §8.1; the beat adds beat_at)."""
        info: dict[str, Any] = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queue": queue,
            "concurrency": self._capacity(),  # shared by all its queues
            "started_at": self._started,
            "tasks": handlers,
            "failures": self.settings.failures,
            "running": jobs.holding,  # of this queue
            "processed": jobs.processed,
            "failed": jobs.failed,
            "quiet": self._quiet,
            **process_usage(self._usage),
        }
        if jobs.suspects.ids:  # held here, run in a child of their own (suspects.py)
            info["suspects"] = sorted(jobs.suspects.ids)
        if len(self.queues) > 1:
            info["queues"] = [t.queue_name for t in self.queues]
        return info

    def _install_signals(self, loop: asyncio.AbstractEventLoop) -> None:
        stops = {signal.SIGTERM, signal.SIGINT}
        for sig in stops:
            try:
                loop.add_signal_handler(sig, self.stop)
            except (NotImplementedError, RuntimeError):  # not the main thread
                return
        # The CLI blocks these while it starts (cli_worker.py): one that came
        # meanwhile is delivered now, to the handler, as a graceful stop.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)

    def _remove_signals(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError):
                return

    # --- the main loop -------------------------------------------------------------

    async def _serve(self) -> None:
        for lane in self._lanes:
            await lane.jobs.open()
            lane.jobs.start(self._died)
        side = [asyncio.create_task(lane.roll_call.run(lane.queue.client)) for lane in self._lanes]
        if self._auto is not None:
            side.append(asyncio.create_task(self._auto.run()))
        for task in side:
            task.add_done_callback(log_failure)
        try:
            await self._claim_loop()
        finally:
            for task in side:
                task.cancel()
        grace, hard_stop = self.settings.grace, self._hard_stop
        await asyncio.gather(
            *(lane.jobs.shut_down(grace=grace, hard_stop=hard_stop) for lane in self._lanes)
        )

    def _died(self, task: asyncio.Task[Any]) -> None:
        """A runner or the ack writer must never end on its own: if one does,
        say why and stop the worker rather than run on as a black hole."""
        if task.cancelled():
            return
        log.critical("worker task ended unexpectedly: %r; stopping", task.exception())
        self.stop()
        self.stop()


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Any, *args: Any) -> None:
    loop.call_soon_threadsafe(fn, *args)

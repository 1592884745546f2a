"""The worker: wait for jobs, claim them in batches, hand them to its job
pool (pool.py: the runners, acknowledgements, giving back at shutdown), and
stop without losing any. A heartbeat thread renews leases and reaps expired
ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import signal
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio

from conveyor.client.aio import AsyncQueue
from conveyor.client.connection import SOCKET_TIMEOUT, resolve_url, wire_endpoint
from conveyor.client.pipelines import PIPELINE_TASK
from conveyor.client.sync import connect as connect_sync
from conveyor.client.tasks import Task, Tasks
from conveyor.client.transport import SyncRunner
from conveyor.client.wire import SyncWire
from conveyor.errors import ConfigurationError, ConnectionLostError, ConveyorError
from conveyor.hooks import Hook, Hooks
from conveyor.hooks import call as call_hooks
from conveyor.protocol import ops
from conveyor.timeutil import to_ms
from conveyor.worker import job_lines
from conveyor.worker.courier import Courier
from conveyor.worker.heartbeat import Heartbeat
from conveyor.worker.metrics import MetricsRecorder
from conveyor.worker.pipelines import drive_pipeline
from conveyor.worker.pool import JobPool, log_failure
from conveyor.worker.processes import PoolSettings
from conveyor.worker.tuning import AutoConcurrency, Controller
from conveyor.worker.waiting import Blocker, advance

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
    metrics: bool = True  # keep the queue's metrics history (conveyor.metrics)
    idle_wait: float = 5.0  # longest single block on Redis when idle; burst's horizon
    promote_batch: int = 1000
    # process execution (README, "Execution"): where sync handlers without an
    # executor of their own run ("thread" or "process"), and the child pool
    executor: str = "thread"
    processes: int | None = None  # children; default: the CPU count
    max_tasks_per_child: int | None = None  # recycle a child after this many jobs
    max_memory_per_child: int | None = None  # bytes: recycle after a job took its RSS past it

    # --concurrency auto (worker/tuning.py): the limit follows the CPU, from
    # min_concurrency up to max_concurrency (default: the larger of
    # `concurrency` and 4 per CPU)
    auto_concurrency: bool = False
    min_concurrency: int = 1
    max_concurrency: int | None = None

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ConfigurationError("concurrency must be at least 1")
        if not 1 <= self.min_concurrency <= self.most_concurrency:
            raise ConfigurationError("need 1 <= min_concurrency <= max_concurrency")
        if self.executor not in ("thread", "process"):
            raise ConfigurationError("executor must be 'thread' or 'process'")
        for name in ("processes", "max_tasks_per_child", "max_memory_per_child"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigurationError(f"{name} must be at least 1")
        if self.lease < 0.2:
            raise ConfigurationError("lease must be at least 0.2 s")

    @property
    def most_concurrency(self) -> int:
        """The most jobs this worker ever runs at once."""
        if not self.auto_concurrency:
            return self.concurrency
        return self.max_concurrency or max(self.concurrency, 4 * (os.cpu_count() or 1))

    @property
    def beat_every(self) -> float:
        return self.heartbeat_interval or self.lease / 3


class Worker:
    """Runs the handlers of `tasks` for jobs of its queue."""

    def __init__(
        self,
        tasks: Tasks,
        *,
        url: str | None = None,
        settings: WorkerSettings | None = None,
        hooks: Sequence[Hook] = (),
    ) -> None:
        self.tasks = tasks
        self.settings = settings or WorkerSettings()
        self._extra_hooks = Hooks(hooks).hooks  # besides those of tasks.settings
        self.url = resolve_url(url or tasks.url)
        self.id = f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"
        self._started = time.time()
        self._jobs: JobPool | None = None
        self._stopping = False
        self._hard_stop = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._wait_task: asyncio.Task[Any] | None = None
        self._wake_task: asyncio.Future[None] | None = None
        self._suspect: str | None = None  # a job that stalled before, running here
        self._auto = self._auto_concurrency()
        self._largest = max([1, *(t.size for t in self.handlers.values())])
        self._side_tasks: set[asyncio.Future[Any]] = set()

    # --- public ----------------------------------------------------------------

    @property
    def processed(self) -> int:
        """Jobs completed by this worker."""
        return 0 if self._jobs is None else self._jobs.processed

    @property
    def failed(self) -> int:
        """Jobs this worker failed for good (retries not counted)."""
        return 0 if self._jobs is None else self._jobs.failed

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
        queue = AsyncQueue(
            self.tasks.queue_name,
            url=self.url,
            settings=self.tasks.settings,
            failures=self.settings.failures,
        )
        # on a cluster, every connection follows the queue's slot (queue.route)
        sync_client = connect_sync(self.url, route=queue.route)
        endpoint = wire_endpoint(self.url, queue.route)
        self._blocker = Blocker(
            self.url, endpoint, self.settings.idle_wait + SOCKET_TIMEOUT, route=queue.route
        )
        self._queue = queue
        self._runner = queue.runner
        recorder = MetricsRecorder(queue.core) if self.settings.metrics else None
        own: list[Hook] = [] if recorder is None else [recorder]
        lines = job_lines.job_lines()  # by the log level
        if lines is not None:
            own.append(lines)
        hooks = Hooks((*self.tasks.settings.hooks, *self._extra_hooks, *own))
        self._hooks = hooks
        courier = None
        if not self.settings.failures:  # a failure lane's jobs have no parents
            courier = Courier(
                queue.name, url=self.url, settings=self.tasks.settings,
                interval=self.settings.beat_every,
            )  # fmt: skip
        jobs = JobPool(
            queue,
            worker_id=self.id,
            handlers=self.handlers,
            concurrency=self.settings.most_concurrency,
            lease=self.settings.lease,
            freed=self._slot_freed,
            hooks=hooks,
            processes=self._pool_settings(),
            capacity=self._capacity,
            on_handed_off=None if courier is None else courier.nudge,
        )
        self._jobs = jobs
        beat_wire = None if endpoint is None else SyncWire(endpoint)
        beat_runner = SyncRunner(sync_client, queue.core.scripts, beat_wire)
        heartbeat = self._heartbeat(beat_runner, jobs, recorder)
        loop = asyncio.get_running_loop()
        self._install_signals(loop)
        try:
            await self._connect(queue)
            call_hooks(hooks.worker_start, self.id, queue.name)
            heartbeat.start()
            if courier is not None:
                courier.start()
            await self._serve(jobs)
        finally:
            heartbeat.stop()
            if courier is not None:
                await asyncio.to_thread(courier.stop)
            await jobs.close()
            self._remove_signals(loop)
            with contextlib.suppress(ConveyorError, redis.RedisError, OSError):
                if recorder is not None:  # the counts since the last beat
                    await asyncio.to_thread(recorder.flush, beat_runner)
                await asyncio.to_thread(heartbeat.leave)
                await queue.client.delete(queue.core.keys.wake(self.id))
            await self._blocker.close()
            await queue.close()
            sync_client.close()
            if beat_wire is not None:
                beat_wire.close()
            call_hooks(hooks.worker_stop, self.id, queue.name)

    # --- set-up ------------------------------------------------------------------

    def _auto_concurrency(self) -> AutoConcurrency | None:
        s = self.settings
        if not s.auto_concurrency:
            return None
        controller = Controller(low=s.min_concurrency, high=s.most_concurrency)
        return AutoConcurrency(controller, lambda: self._in_flight)

    def _pool_settings(self) -> PoolSettings:
        s = self.settings
        return PoolSettings(
            size=s.processes or os.cpu_count() or 1,
            max_tasks_per_child=s.max_tasks_per_child,
            max_memory_per_child=s.max_memory_per_child,
            runs_sync=s.executor == "process",
        )

    async def _connect(self, queue: AsyncQueue) -> None:
        delay = 0.1
        while True:
            try:
                await queue.check()
                await self._register_failure_tasks(queue)
                return
            except ConnectionLostError as exc:
                if self._stopping:
                    raise
                log.warning("Redis unavailable (%s); retrying in %.1f s", exc, delay)
                await asyncio.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 5.0)

    async def _register_failure_tasks(self, queue: AsyncQueue) -> None:
        """Tell the scripts which tasks have a failure handler (see finish.lua)."""
        names = sorted(self.tasks.failure_handlers)
        if names and not self.settings.failures:
            await queue.client.sadd(queue.core.keys.failure_tasks, *names)

    @property
    def handlers(self) -> dict[str, Task[Any, Any]]:
        """The handlers this worker runs: the tasks, or their failure handlers."""
        if self.settings.failures:
            return self.tasks.failure_handlers
        # every worker can drive the pipelines enqueued in its queue
        driver: Task[Any, Any] = Task(PIPELINE_TASK, drive_pipeline, self.tasks)
        return {PIPELINE_TASK: driver, **self.tasks.handlers}

    def _heartbeat(
        self, runner: SyncRunner, jobs: JobPool, recorder: MetricsRecorder | None
    ) -> Heartbeat:
        loop = asyncio.get_running_loop()
        stalled = self._hooks.on_stalled
        return Heartbeat(
            runner=runner,
            core=self._queue.core,
            worker_id=self.id,
            lease_ms=to_ms(self.settings.lease),
            interval=self.settings.beat_every,
            info=self._info,
            leases=jobs.leases,
            on_lost=lambda ids: _call_soon(loop, jobs.lose, ids),
            on_aborted=lambda ids: _call_soon(loop, jobs.abort, ids),
            on_reaped=(
                (lambda r, f: call_hooks(stalled, recovered=r, failed=f)) if stalled else None
            ),
            after_beat=None if recorder is None else recorder.flush,
        )

    def _info(self) -> str:
        return json.dumps(
            {
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "queue": self.tasks.queue_name,
                "concurrency": self._capacity(),
                "started_at": self._started,
                "beat_at": time.time(),  # this heartbeat's, for the roll call's readers
                "tasks": sorted(n for n in self.handlers if n != PIPELINE_TASK),
                "failures": self.settings.failures,
                "running": self._in_flight,
                "processed": self.processed,
                "failed": self.failed,
            }
        )

    def _install_signals(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self.stop)
            except (NotImplementedError, RuntimeError):  # not the main thread
                return

    def _remove_signals(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError):
                return

    # --- the main loop -------------------------------------------------------------

    async def _serve(self, jobs: JobPool) -> None:
        await jobs.open()
        jobs.start(self._died)
        tuner = None
        if self._auto is not None:
            tuner = asyncio.create_task(self._auto.run())
            tuner.add_done_callback(log_failure)
        try:
            await self._claim_loop()
        finally:
            if tuner is not None:
                tuner.cancel()
        await jobs.shut_down(grace=self.settings.grace, hard_stop=self._hard_stop)

    @property
    def _in_flight(self) -> int:
        """Leases held here (claimed, running or awaiting acknowledgement):
        what claims are bounded by, and what `alone` and idleness mean."""
        return 0 if self._jobs is None else self._jobs.holding

    def _died(self, task: asyncio.Task[Any]) -> None:
        """A runner or the ack writer must never end on its own: if one does,
        say why and stop the worker rather than run on as a black hole."""
        if task.cancelled():
            return
        log.critical("worker task ended unexpectedly: %r; stopping", task.exception())
        self.stop()
        self.stop()

    async def _claim_loop(self) -> None:
        delay = 0.05
        while not self._stopping:
            if self._suspect is not None:  # it runs alone: no claims beside it
                await self._until_idle()
                continue
            concurrency = self._capacity()
            low_water = max(1, concurrency // 2)
            free = concurrency - self._load
            if free < low_water and self._in_flight:
                self._slot_freed.clear()
                await self._slot_freed.wait()
                continue
            try:
                reply = await self._claim(self._claim_count(free))
                delay = 0.05
                if self._auto is not None:
                    self._auto.saw(self._in_flight)
            except (ConveyorError, redis.RedisError) as exc:
                # never exit on a failed claim: Redis may be back, or the
                # script refused one bad record and the next call goes on
                log.warning("could not claim jobs (%s); trying again", exc)
                await asyncio.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 5.0)
                continue
            if reply.jobs:
                continue
            if reply.held and self._in_flight:
                # a job whose worker died with it waits for a worker that runs
                # nothing else: let ours end, then claim it alone
                await self._until_idle()
                continue
            if self.settings.burst and self._drained(reply):
                if self._jobs is not None and self._jobs.held:
                    # outcomes still to be written may make a flow's parent ready: write
                    # them, then claim again
                    await self._jobs.outcomes_written()
                    continue
                return
            if self.settings.burst and self._in_flight and reply.next_due_ms is None:
                # draining: the next thing that can change is a job of ours
                # ending (a block on Redis would sit out idle_wait after it)
                await self._until_one_ends()
                continue
            await self._wait_for_work(reply)

    @property
    def _load(self) -> int:
        """The capacity taken by held jobs (units of task size)."""
        return 0 if self._jobs is None else self._jobs.load

    def _claim_count(self, free: int) -> int:
        """Jobs to claim for `free` units: as many as fit if all were of
        the largest size (so a claim overshoots by one job at most)."""
        return max(1, free // self._largest)

    def _capacity(self) -> int:
        """How many jobs (units of task size) may run here now."""
        return self.settings.concurrency if self._auto is None else self._auto.limit

    async def _until_idle(self) -> None:
        """Wait until no job runs here (or the worker stops)."""
        while self._in_flight and not self._stopping:
            self._slot_freed.clear()
            await self._slot_freed.wait()
        self._suspect = None

    async def _until_one_ends(self) -> None:
        """Wait until a job running here ends (or the worker stops)."""
        self._slot_freed.clear()
        if self._in_flight and not self._stopping:
            await self._slot_freed.wait()

    def _drained(self, reply: ops.ClaimReply) -> bool:
        """Burst mode ends when nothing is ready or running here and no
        delayed job (a retry, say) comes due within idle_wait."""
        if self._in_flight:
            return False
        horizon = reply.now_ms + to_ms(self.settings.idle_wait)
        return reply.next_due_ms is None or reply.next_due_ms > horizon

    def _claim_call(self, count: int) -> ops.Call:
        core = self._queue.core
        return ops.claim(
            core.keys,
            worker_id=self.id,
            count=count,
            lease_ms=to_ms(self.settings.lease),
            token=os.urandom(8).hex(),
            promote=self.settings.promote_batch,
            events_maxlen=core.settings.events_maxlen,
            alone=not self._in_flight,
        )

    async def _claim(self, count: int) -> ops.ClaimReply:
        call = self._claim_call(count)
        return self._claimed(call, await self._runner.run(call))

    def _claimed(self, call: ops.Call, raw: Any) -> ops.ClaimReply:
        """Take in the jobs a claim leased."""
        reply = ops.decode_claim(raw)
        token = call.args[3]
        assert isinstance(token, str) and self._jobs is not None
        for claimed in reply.jobs:
            if claimed.stalls:
                self._suspect = claimed.id  # claim.lua gave it to us alone
            self._jobs.accept(claimed, token, reply.now_ms)
            if claimed.schedule:
                self._background(advance(self._queue, claimed, reply.now_ms))
        return reply

    def _background(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)
        task.add_done_callback(log_failure)

    async def _wait_for_work(self, reply: ops.ClaimReply) -> None:
        """Block on the wake marker until an enqueue, the next due time, or
        idle_wait — whichever comes first. No polling."""
        timeout = self.settings.idle_wait
        if reply.next_due_ms is not None:
            timeout = min(timeout, max(0.001, (reply.next_due_ms - reply.now_ms) / 1000))
        if self.settings.burst and not self._in_flight and reply.next_due_ms is None:
            timeout = min(timeout, 0.05)
        if self._stopping:
            return
        self._wait_task = asyncio.create_task(self._block(timeout))
        try:
            await self._wait_task
        except asyncio.CancelledError:
            if not self._stopping:
                raise
        except redis.RedisError as exc:
            log.warning("could not wait for jobs on Redis (%s); trying again", exc)
            await asyncio.sleep(0.1 + random.random() * 0.4)
        finally:
            self._wait_task = None

    async def _block(self, timeout: float) -> Any:
        """Block until woken; over the lean wire a claim rides behind the
        blocking pop in the same write, so Redis runs it the moment the pop
        returns: no round trip between waking and leasing (about 0.3 ms less
        enqueue-to-start latency). A claim refused (NOSCRIPT after a Redis
        restart, say) is simply left to the next claim of the loop."""
        keys = self._queue.core.keys
        pop = (keys.marker, keys.wake(self.id), timeout)
        call = self._claim_call(self._claim_count(self._capacity() - self._load))
        script = self._queue.core.scripts["claim"]
        replies = await self._blocker.bzpopmin_then(pop, script.sha, call)
        if replies is None:
            popped = await self._blocker.bzpopmin(*pop)
        else:
            popped = replies[0]
            if not isinstance(replies[1], Exception):
                self._claimed(call, replies[1])
        self._woken(popped)
        return popped

    def _woken(self, popped: Any) -> None:
        """What woke us: `abort=<id>` on our wake key is a client's abort
        of a job we hold (abort.lua); anything else only ends the wait."""
        if not popped or isinstance(popped, Exception) or self._jobs is None:
            return
        member = ops.text(popped[1])
        if member.startswith("abort="):
            self._jobs.abort([member.removeprefix("abort=")])


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Any, *args: Any) -> None:
    loop.call_soon_threadsafe(fn, *args)

"""The jobs a worker holds a lease on, from claim to acknowledgement: the
runners that run them, their progress writes, lost leases, and giving back
the unfinished ones at shutdown.

`concurrency` runner coroutines take accepted jobs from an inbox. A runner
runs job after job while each finishes without suspending (most async
handlers: see execution.py); before one suspends (it awaits I/O, or it is a
sync handler on the thread pool), it wakes an idle runner for the jobs behind
it. A batch of quick jobs so costs one wake-up, not one per job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from conveyor import serializers
from conveyor.client.aio import AsyncQueue
from conveyor.client.tasks import Task
from conveyor.errors import ConnectionLostError, ConveyorError, LeaseLostError, expired_error
from conveyor.hooks import Hooks
from conveyor.hooks import call as call_hooks
from conveyor.hooks import failed as hook_failed
from conveyor.protocol import observe, ops
from conveyor.worker.acks import AckBuffer
from conveyor.worker.context import JobContext
from conveyor.worker.execution import Failure, Outcome, Running, Success, execute
from conveyor.worker.policy import policies, policy_call
from conveyor.worker.steps import WorkerFlows

log = logging.getLogger("conveyor.worker")


class Inbox:
    """Accepted jobs waiting for a runner. At most one idle runner is woken
    at a time: it takes the jobs one after another, and a runner about to
    suspend hands the rest on to the next (`hand_on`)."""

    def __init__(self) -> None:
        self._jobs: deque[Running] = deque()
        self._idle: deque[asyncio.Future[None]] = deque()
        self._waking = False  # a runner was woken and has not looked yet

    def put(self, running: Running) -> None:
        self._jobs.append(running)
        self.hand_on()

    def hand_on(self) -> None:
        """Wake an idle runner if jobs wait and none is on its way already."""
        if not self._jobs or self._waking:
            return
        while self._idle:
            waiter = self._idle.popleft()
            if not waiter.done():  # not a runner cancelled while idle
                waiter.set_result(None)
                self._waking = True
                return

    async def get(self) -> Running:
        while not self._jobs:
            waiter = asyncio.get_running_loop().create_future()
            self._idle.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():  # woken, then cancelled
                    self._waking = False
                    self.hand_on()
                with contextlib.suppress(ValueError):
                    self._idle.remove(waiter)
                raise
            self._waking = False
        return self._jobs.popleft()

    def take_all(self) -> list[Running]:
        jobs = list(self._jobs)
        self._jobs.clear()
        return jobs


class JobPool:
    """The jobs this worker holds, and the runners that run them."""

    def __init__(
        self,
        queue: AsyncQueue,
        *,
        worker_id: str,
        handlers: dict[str, Task[Any, Any]],
        concurrency: int,
        lease: float,
        freed: asyncio.Event,
        hooks: Hooks | None = None,
        on_handed_off: Callable[[], None] | None = None,
    ) -> None:
        self.held: dict[str, Running] = {}
        self.in_flight = 0  # accepted and not finished yet
        self.processed = 0
        self.failed = 0
        self._queue = queue
        self._queue_name = queue.name
        self._worker_id = worker_id
        self._handlers = handlers
        self._policies = policies(handlers, queue.core)  # the tasks' run-time options
        self._policy_calls: dict[str, ops.Call] = {}
        self._concurrency = concurrency
        self._lease = lease
        self._freed = freed  # set whenever a job finishes or a lease is let go
        self._hooks = hooks or Hooks()
        self._all_done = asyncio.Event()
        self._all_done.set()
        self._inbox = Inbox()
        self._acks = AckBuffer(queue.runner, queue.core, self._written, on_handed_off)
        self._executor = ThreadPoolExecutor(concurrency, thread_name_prefix="conveyor-job")
        self._loop = asyncio.get_running_loop()
        self._flows = WorkerFlows(queue)
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, on_died: Callable[[asyncio.Task[None]], None]) -> None:
        """Start the runners and the ack writer; `on_died` if one ends."""
        runners = [self._run_jobs() for _ in range(self._concurrency)]
        self._tasks = [asyncio.create_task(c) for c in [*runners, self._acks.run()]]
        for task in self._tasks:
            task.add_done_callback(on_died)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def outcomes_written(self) -> None:
        """Wait until every outcome handed to the ack writer is in Redis."""
        await self._acks.drained()

    def leases(self) -> list[tuple[str, str]]:
        """(job id, token) of every lease held; read by the heartbeat thread."""
        return [(i, r.ctx.token) for i, r in list(self.held.items())]

    @property
    def holding(self) -> int:
        """Leases held: claimed, running, or finished and awaiting their
        acknowledgement. The worker claims only while this is below its
        concurrency, so a worker that dies takes at most `concurrency` jobs
        with it (docs/reliability.md G3)."""
        return len(self.held)

    def _drop(self, job_id: str) -> Running | None:
        """Stop holding a lease: a slot is free for the next claim."""
        running = self.held.pop(job_id, None)
        if running is not None:
            self._freed.set()
        return running

    # --- running ---------------------------------------------------------------------

    def accept(self, claimed: ops.ClaimedJob, token: str, now_ms: int | None = None) -> None:
        """Hold a claimed job and queue it for a runner."""
        handler = self._handlers.get(claimed.task or "")
        problem, data = None, None
        if handler is None:
            problem = f"UnknownTaskError: no task {claimed.task!r} in this worker"
            log.error(
                "job %s: no task %r in this worker (it runs %s); failing it for good",
                claimed.id, claimed.task, sorted(self._handlers) or "nothing",
            )  # fmt: skip
        else:
            try:
                data = serializers.loads(claimed.data or b"")
            except ValueError as exc:  # UnicodeDecodeError and deep nesting included
                problem = f"UndecodableDataError: job data is not JSON: {exc}"
        if (
            claimed.expires_at_ms is not None
            and now_ms is not None
            and claimed.expires_at_ms <= now_ms
        ):
            problem = expired_error(claimed.expires_at_ms)  # not run: failed for good (§16.2)
        timeout_ms = claimed.timeout_ms or 0
        ctx = JobContext(
            id=claimed.id,
            queue=self._queue_name,
            task=claimed.task or "",
            data=data,
            attempt=claimed.attempts,
            token=token,
            worker_id=self._worker_id,
            report_progress=self._progress,
            report_log=self._job_log,
            flows=self._flows,
            loop=self._loop,
        )
        if claimed.checkpoint is not None:  # resume where the last run saved (§16.7)
            try:
                ctx.checkpoint = serializers.loads(claimed.checkpoint)
            except ValueError as exc:
                problem = problem or f"UndecodableCheckpointError: not JSON: {exc}"
        ctx.report_checkpoint = self._checkpoint
        if claimed.headers:
            ctx.headers = _headers(claimed.headers)
        created = claimed.created_at_ms
        if self._hooks.on_run and claimed.attempts == 1 and now_ms and created is not None:
            ctx.waited = max(0, now_ms - created) / 1000
        policy = self._policies.get(claimed.task or "")
        if policy and problem is None:
            self._policy_calls[claimed.id] = policy_call(
                self._queue.core, claimed.id, token, policy
            )
        running = Running(ctx, timeout_ms / 1000 if timeout_ms > 0 else None, handler, problem)
        self.held[claimed.id] = running
        self.in_flight += 1
        self._all_done.clear()
        self._inbox.put(running)

    async def _run_jobs(self) -> None:
        """One runner: take jobs from the inbox and run them, one at a time."""
        inbox = self._inbox
        while True:
            running = await inbox.get()
            try:
                if running.ctx.id in self._policy_calls:
                    await self._apply_policy(running)
                if not running.ctx.lost:  # its lease may have gone while it waited
                    if self._hooks.on_run:
                        outcome = await self._execute_hooked(running)
                    else:
                        outcome = await execute(running, self._executor, inbox.hand_on)
                    if running.pending:  # progress writes first, or the ended run refuses them
                        inbox.hand_on()
                        await asyncio.gather(*running.pending, return_exceptions=True)
                    if outcome is not None:
                        running.ended = True
                        self._acks.add(running.ctx.id, running.ctx.token, outcome)
                        continue
                self._drop(running.ctx.id)
            finally:
                self.in_flight -= 1
                self._freed.set()
                if not self.in_flight:
                    self._all_done.set()

    async def _apply_policy(self, running: Running) -> None:
        """Give the job its task's options where it carries none (policy.py)."""
        call = self._policy_calls.pop(running.ctx.id)
        try:
            timeout_ms = ops.decode_policy(await self._queue.runner.run(call))
        except ConveyorError as exc:  # Redis away: the job runs on the options it carries
            log.warning("job %s: task options not applied (%s)", running.ctx.id, exc)
            return
        if timeout_ms is None:
            running.ctx.lost = True
        else:
            running.timeout = timeout_ms / 1000 if timeout_ms > 0 else None

    async def _execute_hooked(self, running: Running) -> Outcome:
        """execute() between the hooks of a run."""
        hooks, ctx = self._hooks, running.ctx
        if hooks.before_run:
            call_hooks(hooks.before_run, ctx)
        started = time.perf_counter()
        outcome = await execute(running, self._executor, self._inbox.hand_on)
        duration = time.perf_counter() - started
        if type(outcome) is Success:
            for method in hooks.after_success:  # the common case, without call_hooks' layer
                try:
                    method(ctx, duration=duration)
                except Exception:
                    hook_failed(method)
        elif isinstance(outcome, Failure):
            running.failure = outcome
            call_hooks(
                hooks.after_failure, ctx, outcome.exc, error=outcome.error, duration=duration
            )
        else:
            call_hooks(hooks.after_stopped, ctx, duration=duration)
        return outcome

    def _written(self, job_id: str, what: str) -> None:
        """An outcome reached Redis (or was given up): stop holding the lease."""
        running = self._drop(job_id)
        hooks = self._hooks
        # the common outcome tested first: failure-only hooks cost a success nothing
        wanted = hooks.on_completed if what == "completed" else hooks.on_outcome
        if running is not None and wanted:
            self._tell_outcome(running, what)
        if what == "lost":
            log.warning("job %s: lease lost before its outcome was written; discarded", job_id)
        elif what == "failed":
            self.failed += 1
        elif what == "completed":
            self.processed += 1

    def _tell_outcome(self, running: Running, what: str) -> None:
        hooks, ctx = self._hooks, running.ctx
        if what == "completed":
            for method in hooks.on_completed:  # the common case, without call_hooks' layer
                try:
                    method(ctx)
                except Exception:
                    hook_failed(method)
            return
        error = running.failure.error if running.failure is not None else ""
        if what in ("retried", "delayed"):
            call_hooks(hooks.on_retry, ctx, error=error)
        elif what == "failed":
            call_hooks(hooks.on_final_failure, ctx, error=error)
        elif what in ("lost", "unwritten"):  # unwritten: left to lease expiry
            call_hooks(hooks.on_lease_lost, ctx)

    def lose(self, ids: list[str]) -> None:
        """The heartbeat found these leases gone: stop their handlers."""
        for job_id in ids:
            running = self.held.get(job_id)
            if running is None or running.ended:  # the ack's reply says whether it counted
                continue
            log.warning("job %s: lease lost (expired or taken over); stopping it", job_id)
            running.ctx.lost = True
            if running.scope is not None:
                running.scope.reschedule(self._loop.time())
            call_hooks(self._hooks.on_lease_lost, running.ctx)

    def _progress(self, ctx: JobContext, fraction: float) -> None:
        core = self._queue.core
        call = ops.progress(
            core.keys,
            job_id=ctx.id,
            token=ctx.token,
            value=fraction,
            events_maxlen=core.settings.events_maxlen,
        )
        self._write_for(ctx, call, "progress update")

    def _job_log(self, ctx: JobContext, lines: list[str]) -> None:
        call = observe.job_log(self._queue.core.keys, job_id=ctx.id, token=ctx.token, lines=lines)
        self._write_for(ctx, call, "job log write")

    def _write_for(self, ctx: JobContext, call: ops.Call, what: str) -> None:
        """A write from a handler (progress, its log): async handlers go on
        at once, sync ones (in a pool thread) wait for the write."""
        running = self.held.get(ctx.id)
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a sync handler's thread
            future = asyncio.run_coroutine_threadsafe(self._queue.runner.run(call), self._loop)
            try:
                future.result(timeout=self._lease)
            except Exception as exc:  # best effort: the job goes on
                log.warning("%s failed: %s", what, exc)
            return
        task = asyncio.ensure_future(self._queue.runner.run(call))
        task.add_done_callback(log_failure)
        if running is not None:
            running.pending.append(task)

    def _checkpoint(self, ctx: JobContext, state: str) -> None:
        """Save a handler's checkpoint: a sync handler (in a pool thread) waits
        for the write and learns of a lost lease; an async one goes on (the
        write lands before its outcome, which is written after it)."""
        call = ops.checkpoint(self._queue.core.keys, job_id=ctx.id, token=ctx.token, state=state)
        if _in_a_thread():
            future = asyncio.run_coroutine_threadsafe(self._queue.runner.run(call), self._loop)
            if int(future.result(timeout=self._lease)) != 1:
                raise LeaseLostError(f"job {ctx.id}: lease lost; checkpoint not saved")
            return
        task = asyncio.ensure_future(self._queue.runner.run(call))
        task.add_done_callback(log_failure)
        running = self.held.get(ctx.id)
        if running is not None:
            running.pending.append(task)

    # --- shutdown ----------------------------------------------------------------------

    async def shut_down(self, *, grace: float, hard_stop: asyncio.Event) -> None:
        """Give back what never started, let running jobs finish within the
        grace period, give back the rest at once, write every outcome."""
        unstarted = self._inbox.take_all()
        self.in_flight -= len(unstarted)
        await self._release(unstarted, started=False)
        if self.in_flight:
            waiting = asyncio.create_task(self._all_done.wait())
            hard = asyncio.create_task(hard_stop.wait())
            await asyncio.wait([waiting, hard], timeout=grace, return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            hard.cancel()
        leftovers = [r for r in self.held.values() if not r.ctx.lost and r.scope is not None]
        now = self._loop.time()
        for running in leftovers:
            running.ctx.lost = True  # its writes are dropped: it goes back to the queue
            if running.scope is not None:
                running.scope.reschedule(now)
        await self._release(leftovers, started=True)
        await self._acks.drained()

    async def _release(self, runnings: list[Running], *, started: bool) -> None:
        if not runnings:
            return
        core = self._queue.core
        leases = [(r.ctx.id, r.ctx.token, started) for r in runnings]
        call = ops.release(core.keys, leases, events_maxlen=core.settings.events_maxlen)
        try:
            await self._queue.runner.run(call)
        except ConnectionLostError as exc:
            log.warning(
                "could not give back %d job(s) (%s): they return on lease expiry", len(leases), exc
            )
        for job_id, _, _ in leases:
            self._drop(job_id)
        log.info("gave back %d unfinished job(s)", len(leases))


def _headers(text: str) -> dict[str, str] | None:
    try:
        headers = serializers.loads(text)
    except ValueError:
        return None  # not for the run to fail on: the job's data is what it needs
    return headers if isinstance(headers, dict) else None


def log_failure(future: Any) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("a write to Redis in the background failed: %s", future.exception())


def _in_a_thread() -> bool:
    """True in a sync handler's pool thread (no running event loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return True
    return False

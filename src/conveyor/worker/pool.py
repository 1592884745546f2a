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
import logging
import os
import time
import types
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from conveyor import serializers
from conveyor.client.aio import AsyncQueue
from conveyor.client.tasks import Task
from conveyor.errors import ConnectionLostError, ConveyorError, expired_error
from conveyor.hooks import Hooks
from conveyor.hooks import call as call_hooks
from conveyor.hooks import failed as hook_failed
from conveyor.protocol import ops
from conveyor.worker.acks import AckBuffer, Rider
from conveyor.worker.batches import Batches
from conveyor.worker.context import JobContext, job_var
from conveyor.worker.execution import (
    Outcome,
    Processes,
    Running,
    aborted_failure,
    execute,
)
from conveyor.worker.inbox import Inbox
from conveyor.worker.metrics import MetricsRecorder
from conveyor.worker.outcome_hooks import after_run, tell_outcome
from conveyor.worker.policy import carried, policies, policy_call
from conveyor.worker.processes import PoolSettings, ProcessPool, needs_processes
from conveyor.worker.steps import WorkerFlows
from conveyor.worker.suspects import SuspectLane
from conveyor.worker.watchdog import LoopWatchdog
from conveyor.worker.writes import HandlerWrites, log_failure

__all__ = ["Inbox", "JobPool", "log_failure"]

log = logging.getLogger("conveyor.worker")


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
        processes: PoolSettings | None = None,
        suspects: int = 1,
        capacity: Callable[[], int] | None = None,
        on_handed_off: Callable[[], None] | None = None,
        on_suspect_done: Callable[[], None] | None = None,
    ) -> None:
        self.held: dict[str, Running] = {}
        self.in_flight = 0  # accepted and not finished yet
        self.extra_units = 0  # what the held jobs of tasks with a size > 1 take beyond 1 each
        self._started_extra = 0  # the same, of the started ones
        self._gated = 0  # heavy jobs waiting for room (_room_for)
        self._room = asyncio.Event()
        self._capacity = capacity or (lambda: concurrency)
        self.processed = 0
        self.failed = 0
        self._queue = queue
        self._queue_name = queue.name
        self._worker_id = worker_id
        self._handlers = handlers
        self._policies = policies(handlers, queue.core)  # the tasks' run-time options
        self._policy_calls: dict[str, ops.Call] = {}
        self._unsent_policies: list[str] = []  # jobs accepted whose policy call is not sent yet
        self._policy_replies: dict[str, tuple[asyncio.Future[list[Any]], int]] = {}
        self._concurrency = concurrency
        self._lease = lease
        self._freed = freed  # set whenever a job finishes or a lease is let go
        self._hooks = hooks = hooks or Hooks()
        # No hook of a run reads current_job() or logs (the metrics recorder's only): between
        # two quick runs, a runner may leave the first job current until the next is set.
        self._quiet_runs = all(
            isinstance(getattr(method, "__self__", None), MetricsRecorder)
            for method in (*hooks.before_run, *hooks.after_success, *hooks.after_failure,
                           *hooks.after_stopped)
        )  # fmt: skip
        self._all_done = asyncio.Event()
        self._all_done.set()
        self._inbox = Inbox()
        self._acks = AckBuffer(queue.runner, queue.core, self._written, on_handed_off)
        self._executor = ThreadPoolExecutor(concurrency, thread_name_prefix="conveyor-job")
        self._loop = asyncio.get_running_loop()
        self._flows = WorkerFlows(queue, on_handed_off)
        writes = HandlerWrites(queue, self._loop, lease, self.held)
        self._progress = writes.progress  # bound once: every JobContext takes them
        self._job_log = writes.job_log
        self._checkpoint = writes.checkpoint
        self._tasks: list[asyncio.Task[None]] = []
        self._watchdog = LoopWatchdog(
            self._loop,
            handlers=_loop_handlers(handlers),
            busy=lambda: self.in_flight > 0,
            execute_code=execute.__code__,
        )
        processes = processes or PoolSettings(size=os.cpu_count() or 1)
        self.processes = (
            ProcessPool(processes, on_progress=self._progress)
            if needs_processes(handlers, processes)
            else None
        )
        self.suspects = SuspectLane(processes, suspects, self._progress, on_suspect_done)

        self._batches = Batches(self._executor, self._settle, hooks)

    async def open(self) -> None:
        """Start the child processes, if any handler runs in one."""
        if self.processes is not None:
            self.processes.start()

    def start(self, on_died: Callable[[asyncio.Task[None]], None]) -> None:
        """Start the runners and the ack writer; `on_died` if one ends."""
        runners = [self._run_jobs() for _ in range(self._concurrency)]
        self._tasks = [asyncio.create_task(c) for c in [*runners, self._acks.run()]]
        for task in self._tasks:
            task.add_done_callback(on_died)
        self._watchdog.start()

    async def close(self) -> None:
        self._watchdog.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._batches.close()
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self.processes is not None:
            await self.processes.close()
        await self.suspects.close()

    @property
    def load(self) -> int:
        """The capacity the held leases take, in units of task size."""
        return len(self.held) + self.extra_units

    @property
    def outcomes_ahead(self) -> int:
        """Outcomes in batches on the wire, which Redis records before anything
        written after them on the connection (acks.AckBuffer.ahead)."""
        return self._acks.ahead

    def ride_with(self, rider: Rider) -> None:
        """Let the worker send a claim behind a batch of outcomes (acks.Ride)."""
        self._acks.rider = rider

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
            if self.suspects.ids:
                self.suspects.let_go(job_id)
        return running

    # --- running ---------------------------------------------------------------------

    def accept(self, claimed: ops.ClaimedJob, token: str, now_ms: int | None = None) -> None:
        """Hold a claimed job and queue it for a runner."""
        task = claimed.task or ""
        handler = self._handlers.get(task)
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
        expires = claimed.expires_at_ms
        if expires is not None and now_ms is not None and expires <= now_ms:
            problem = expired_error(expires)  # not run: failed for good (§16.2)
        # JobContext's fields in their order (test_handler_steps.py checks them): a
        # dataclass built by keyword costs about twice as much
        ctx = JobContext(
            claimed.id, self._queue_name, task, data, claimed.attempts, token, self._worker_id,
            self._progress, False, False, None, self._job_log, None, self._flows, self._loop,
            None, self._checkpoint,
        )  # fmt: skip
        if claimed.checkpoint is not None:  # resume where the last run saved (§16.7)
            try:
                ctx.checkpoint = serializers.loads(claimed.checkpoint)
            except ValueError as exc:
                problem = problem or f"UndecodableCheckpointError: not JSON: {exc}"
        if claimed.headers:
            ctx.headers = _headers(claimed.headers)
        created = claimed.created_at_ms
        if self._hooks.on_run and claimed.attempts == 1 and now_ms and created is not None:
            waited = now_ms - created
            ctx.waited = (waited if waited > 0 else 0) / 1000
        if self._policies and problem is None:
            policy = self._policies.get(task)
            if policy and not carried(claimed, policy):
                self._policy_calls[claimed.id] = policy_call(
                    self._queue.core, claimed.id, token, policy
                )
                self._unsent_policies.append(claimed.id)
        timeout_ms = claimed.timeout_ms
        timeout = timeout_ms / 1000 if timeout_ms is not None and timeout_ms > 0 else None
        running = Running(ctx, timeout, handler, problem)
        self.held[claimed.id] = running
        if claimed.stalls:  # its worker died with it: it runs isolated (suspects.py)
            self.suspects.hold(running, claimed.stalls)
        self.in_flight += 1
        if self.in_flight == 1:  # set only when none is in flight
            self._all_done.clear()
        if handler is None:
            self._inbox.put(running)
            return
        if handler.size > 1:
            running.extra = handler.size - 1
            self.extra_units += running.extra
        if handler.batch_size is not None:
            self._batches.put(running)
        else:
            self._inbox.put(running)

    async def _run_jobs(self) -> None:
        """One runner: take jobs from the inbox and run them, one at a time."""
        inbox, waiting = self._inbox, self._inbox.jobs
        hooks, policy_calls, acks = self._hooks, self._policy_calls, self._acks
        executor, hand_on, stalls = self._executor, inbox.hand_on, self._watchdog.stalls
        processes, suspects = self.processes, self.suspects
        leave = self._quiet_runs
        while True:
            # a job that waits is taken at once: no coroutine call for inbox.get()
            if waiting:
                running = waiting.popleft()
            else:
                job_var.set(None)  # the last quick run's job, left current (execute)
                running = await inbox.get()
            ctx = running.ctx
            try:
                if running.extra:  # a heavy job: it starts when its size fits
                    job_var.set(None)
                    inbox.hand_on()
                    await self._room_for(running)
                if ctx.id in policy_calls:
                    job_var.set(None)
                    await self._apply_policy(running)
                if running.isolated and await suspects.is_flow_parent(self._queue, ctx.id):
                    running.isolated = False  # a child process has no flow access (child.py)
                if not ctx.lost:  # its lease may have gone while it waited
                    procs: Processes | None = suspects if running.isolated else processes
                    if hooks.on_run:  # the hooks of a run, around execute() (not a coroutine more)
                        if hooks.before_run:
                            call_hooks(hooks.before_run, ctx)
                        started = time.perf_counter()
                        outcome = await execute(running, executor, hand_on, stalls, procs, leave)
                        after_run(hooks, running, outcome, time.perf_counter() - started)
                    else:
                        outcome = await execute(running, executor, hand_on, stalls, procs, leave)
                    if running.pending:  # progress writes first, or the ended run refuses them
                        job_var.set(None)
                        inbox.hand_on()
                        await asyncio.gather(*running.pending, return_exceptions=True)
                    if outcome is not None:
                        running.ended = True
                        acks.add(ctx.id, ctx.token, outcome)
                        continue
                self._drop(ctx.id)
            finally:
                self.in_flight -= 1
                if running.extra:
                    self.extra_units -= running.extra
                    self._started_extra -= running.extra
                self._freed.set()
                if self._gated:
                    self._room.set()
                if not self.in_flight:
                    self._all_done.set()

    def _send_policies(self) -> None:
        """Send the policy calls of every job accepted so far in one round
        trip (a claim's jobs are all accepted before the first one runs)."""
        ids, self._unsent_policies = self._unsent_policies, []
        ids = [i for i in ids if i in self._policy_calls]  # not given back meanwhile
        if not ids:
            return
        sent = asyncio.ensure_future(
            self._queue.runner.run_many([self._policy_calls[i] for i in ids])
        )
        sent.add_done_callback(_seen)  # each job's runner reads it, or falls back on its own
        for position, job_id in enumerate(ids):
            self._policy_replies[job_id] = (sent, position)

    async def _apply_policy(self, running: Running) -> None:
        """Give the job its task's options where it carries none (policy.py)."""
        job_id = running.ctx.id
        if job_id in self._unsent_policies:
            self._send_policies()
        call = self._policy_calls.pop(job_id)
        try:
            sent = self._policy_replies.pop(job_id, None)
            try:
                raw = None if sent is None else (await asyncio.shield(sent[0]))[sent[1]]
            except ConveyorError:  # the batch was refused: this job's call alone
                raw = None
            if raw is None:
                raw = await self._queue.runner.run(call)
            timeout_ms = ops.decode_policy(raw)
        except ConveyorError as exc:  # Redis away: the job runs on the options it carries
            log.warning("job %s: task options not applied (%s)", running.ctx.id, exc)
            return
        if timeout_ms is None:
            running.ctx.lost = True
        else:
            running.timeout = timeout_ms / 1000 if timeout_ms > 0 else None

    async def _room_for(self, running: Running) -> None:
        """Wait until the started jobs leave room for this one's size (or none
        runs): the claim loop counts sizes, this keeps a claim's last heavy
        job from starting beside more than the capacity."""
        self._gated += 1
        try:
            while True:
                started = self.in_flight - self._inbox.waiting - self._gated + self._started_extra
                if started <= 0 or started + 1 + running.extra <= self._capacity():
                    break
                self._room.clear()
                await self._room.wait()
        finally:
            self._gated -= 1
        self._started_extra += running.extra

    def _settle(self, running: Running, outcome: Outcome) -> None:
        """A batch call ended for this job: its outcome to write (or none, its
        lease lost), and its slot free."""
        if outcome is not None:
            running.ended = True
            self._acks.add(running.ctx.id, running.ctx.token, outcome)
        else:
            self._drop(running.ctx.id)
        self.in_flight -= 1
        self.extra_units -= running.extra
        self._freed.set()
        if self._gated:
            self._room.set()
        if not self.in_flight:
            self._all_done.set()

    def _written(self, job_id: str, what: str) -> None:
        """An outcome reached Redis (or was given up): stop holding the lease."""
        running = self.held.pop(job_id, None)  # self._drop, inline: once per job
        if running is not None:
            self._freed.set()
            if self.suspects.ids:
                self.suspects.let_go(job_id)
        if what == "completed":  # the common outcome first, its hooks without a layer
            if running is not None:
                for method in self._hooks.on_completed:
                    try:
                        method(running.ctx)
                    except Exception:
                        hook_failed(method)
            self.processed += 1
            return
        if running is not None and self._hooks.on_outcome:
            tell_outcome(self._hooks, running, what)
        if what == "lost":
            log.warning("job %s: lease lost before its outcome was written; discarded", job_id)
        elif what == "failed":
            self.failed += 1

    def lose(self, ids: list[str]) -> None:
        """The heartbeat found these leases gone: stop their handlers."""
        for job_id in ids:
            running = self.held.get(job_id)
            if running is None or running.ended:  # the ack's reply says whether it counted
                continue
            log.warning("job %s: lease lost (expired or taken over); stopping it", job_id)
            running.ctx.lost = running.ctx.cancelled = True
            if running.scope is not None:
                running.scope.reschedule(self._loop.time())
            running.lease_loss_told = True
            call_hooks(self._hooks.on_lease_lost, running.ctx)

    def abort(self, ids: list[str]) -> None:
        """Clients aborted these jobs (abort.lua): stop them; each run then
        fails for good with AbortedError once its code has stopped."""
        for job_id in ids:
            running = self.held.get(job_id)
            if running is None or running.ended or running.aborted:
                continue  # done already (its outcome is on its way), or told before
            log.warning("job %s: aborted by a client; stopping it", job_id)
            running.aborted = running.ctx.cancelled = True
            if running.scope is not None:  # running: cancel it (a child is terminated)
                running.scope.reschedule(self._loop.time())
            elif running.thread is None:  # not started: it never will
                failure = aborted_failure()
                running.problem = failure.error

    # --- shutdown ----------------------------------------------------------------------

    async def shut_down(self, *, grace: float, hard_stop: asyncio.Event) -> None:
        """Give back what never started, let running jobs finish within the
        grace period, give back the rest at once, write every outcome."""
        unstarted = self._inbox.take_all() + self._batches.take_all()
        self.in_flight -= len(unstarted)
        self.extra_units -= sum(r.extra for r in unstarted)
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
            running.ctx.lost = running.ctx.cancelled = True  # writes dropped: back to the queue
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


def _loop_handlers(handlers: dict[str, Task[Any, Any]]) -> dict[types.CodeType, str]:
    """The code of each async handler (run on the loop), to name a blocker by."""
    codes = {}
    for name, task in handlers.items():
        code = getattr(task.fn, "__code__", None)
        if task.is_async and isinstance(code, types.CodeType):
            codes[code] = name
    return codes


def _headers(text: str) -> dict[str, str] | None:
    try:
        headers = serializers.loads(text)
    except ValueError:
        return None  # not for the run to fail on: the job's data is what it needs
    return headers if isinstance(headers, dict) else None


def _seen(future: asyncio.Future[Any]) -> None:
    """Mark a shared future's exception as seen (its users read it, or not)."""
    if not future.cancelled():
        future.exception()

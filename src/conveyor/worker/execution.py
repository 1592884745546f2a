"""Running one claimed job's handler and turning what happened into an outcome."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import logging
import types
from asyncio import get_running_loop
from collections.abc import Callable, Coroutine, Generator
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Protocol

from conveyor import serializers
from conveyor.client.tasks import Task
from conveyor.errors import (
    AbortedError,
    ConfigurationError,
    JobTimeoutError,
    NotSerializableError,
    PermanentError,
    RateLimited,
    ResumeLater,
)
from conveyor.timeutil import delay_until_ms
from conveyor.worker.context import JobContext, job_var
from conveyor.worker.error_text import describe
from conveyor.worker.watchdog import Stalls

log = logging.getLogger("conveyor.worker")


@dataclass(slots=True)
class Running:
    """A job this worker holds a lease on, from claim to acknowledgement."""

    ctx: JobContext
    timeout: float | None
    handler: Task[Any, Any] | None
    problem: str | None  # set when the job cannot run at all (corrupt record)
    scope: asyncio.Timeout | None = None
    # progress writes still in flight: the outcome is written after them,
    # or the ended run would refuse them
    pending: list[asyncio.Future[Any]] = field(default_factory=list)
    # the handler is done and its outcome waits in the ack buffer: a heartbeat that finds
    # the lease gone may only have raced that outcome's write, whose reply tells which
    ended: bool = False
    # a sync handler's run in its thread: the run is over only when it is done
    thread: concurrent.futures.Future[Any] | None = None
    failure: Failure | None = None  # kept for the hooks told when the failure is written
    in_process: bool = False  # run by a child process, which gives the outcome itself
    aborted: bool = False  # a client aborted it (Queue.abort): it fails for good
    extra: int = 0  # its task's size - 1: the capacity it takes beyond one slot
    # a process run's deadline, armed when a child takes the job (not while it waits for one)
    deadline: Deadline | None = None
    lease_loss_told: bool = False  # on_lease_lost was called: the ack's "lost" is not a second
    isolated: bool = False  # a suspect: it runs in a child of its own (suspects.py)


class Processes(Protocol):
    """Where handlers run in child processes (processes.ProcessPool)."""

    runs_sync: bool  # sync handlers without an executor of their own run here too

    def run(self, running: Running) -> Coroutine[Any, Any, Outcome]: ...


@dataclass(frozen=True, slots=True)
class Success:
    result: str


@dataclass(frozen=True, slots=True)
class Failure:
    error: str
    permanent: bool
    retry_delay_ms: int | None
    exc: BaseException | None = None  # what the handler raised, for hooks


@dataclass(frozen=True, slots=True)
class Limited:
    """The handler raised RateLimited: back unpunished, its queue or group held."""

    wait_ms: int
    scope: str


@dataclass(frozen=True, slots=True)
class Deferred:
    """The handler raised ResumeLater: back to wait, no attempt counted."""

    delay_ms: int
    checkpoint: str  # JSON, or '' to keep the saved one


Ended = Success | Failure | Limited | Deferred  # how a run ended, to be written
Outcome = Ended | None  # None: lease lost, nothing to write


def _retry_delay(exc: BaseException) -> int | None:
    retry_at = getattr(exc, "retry_at", None)
    if retry_at is None:
        return None
    try:
        return max(0, delay_until_ms(retry_at))
    except (TypeError, ValueError):
        return None


def failure_of(exc: BaseException) -> Failure | Limited | Deferred:
    if isinstance(exc, RateLimited):
        return Limited(max(1, round(exc.retry_after * 1000)), exc.scope)
    if isinstance(exc, ResumeLater):
        try:
            state = serializers.dumps(exc.checkpoint) if exc.saves_checkpoint else ""
        except NotSerializableError as bad:
            return Failure(describe(bad), True, None, bad)
        return Deferred(round(exc.delay * 1000), state)
    permanent = isinstance(exc, PermanentError | NotSerializableError)
    return Failure(describe(exc), permanent, _retry_delay(exc), exc)


NOTHING = Success("null")  # the outcome of the many handlers that return nothing


async def execute(
    running: Running,
    executor: Executor,
    on_suspend: Callable[[], None],
    stalls: Stalls | None = None,
    processes: Processes | None = None,
    leave_current: bool = False,
) -> Outcome:
    """Run the handler under its timeout; never raises but CancelledError.
    `on_suspend` is called once if the handler does not finish at once: it
    then runs on under its deadline, counted from its start (plus the time
    other handlers blocked the loop, in `stalls`), so a timeout or a lost
    lease (Running.scope) can still cancel it. A sync handler's thread cannot
    be stopped: its run ends, and its outcome is known, only when it returns.
    `leave_current`: a handler that finished at once leaves current_job() set,
    for the caller to reset (a contextvar set costs about 0.5 µs)."""
    if running.problem is not None:
        return Failure(running.problem, True, None)
    job_var.set(running.ctx)  # set_current, without its call
    loop = get_running_loop()
    started = loop.time()
    left = False
    try:
        finished, result = _start(running, loop, executor, processes)
        if finished:
            left = leave_current
            if running.timeout is not None and loop.time() - started > running.timeout:
                return _blocked_past(running, loop.time() - started)
        else:
            on_suspend()
            deadline = Deadline(running, started, stalls)
            try:
                async with asyncio.timeout(None) as scope:
                    running.scope = scope
                    if running.in_process:
                        running.deadline = deadline
                    else:
                        deadline.arm(loop)
                    result = await result
            finally:
                deadline.disarm()
            if running.in_process:
                return result  # type: ignore[no-any-return]  # the child's outcome
            if running.thread is None and deadline.overran(loop.time()):
                return _blocked_past(running, loop.time() - started)
        if result is None:
            return NOTHING
        return Success(serializers.dumps(result, what="the result"))
    except TimeoutError as exc:
        if running.aborted:
            return aborted_failure()
        if running.ctx.lost:
            return None
        if running.scope is not None and running.scope.expired():
            err = JobTimeoutError(f"timed out after {running.timeout} s")
            return Failure(describe(err), False, None, err)
        return failure_of(exc)
    except Exception as exc:
        return None if running.ctx.lost else failure_of(exc)
    finally:
        running.scope = None
        if not left:
            job_var.set(None)
        if running.thread is not None:
            await _thread_end(running)


def aborted_failure() -> Failure:
    err = AbortedError("aborted by a client (Queue.abort) while it ran")
    return Failure(f"{type(err).__name__}: {err}", True, None, err)


def _blocked_past(running: Running, took: float) -> Failure:
    """An async handler that finished without giving the loop back in time:
    it ran past its timeout, and the loop could not stop it."""
    err = JobTimeoutError(  # protocol §8 step 5: the text starts as every timeout's does
        f"timed out after {running.timeout} s (it ran {took:.1f} s while blocking the event "
        "loop, which could not stop it)"
    )
    return Failure(describe(err), False, None, err)


class Deadline:
    """A job's timeout, armed on the loop. When it comes, the time other
    handlers blocked the loop since the job started is added first (the job
    could not run then); only a deadline that holds with that credit cancels
    the run, and sets the job's cooperative `cancelled` flag."""

    def __init__(self, running: Running, started: float, stalls: Stalls | None) -> None:
        self.running = running
        self.started = started
        self.stalls = stalls
        self._handle: asyncio.TimerHandle | None = None
        # a process run: when its child really began it (loop time), None until it has
        self._began: Callable[[], float | None] | None = None

    def due(self, now: float) -> float | None:
        timeout = self.running.timeout
        if timeout is None:
            return None
        started = self.started
        if self._began is not None:  # read only when the deadline comes: a lock in shared memory
            started = self._began() or started
        credit = 0.0
        if self.stalls is not None:
            credit = self.stalls.credit(self.running.ctx.id, started, now)
        return started + timeout + credit

    def start(
        self, loop: asyncio.AbstractEventLoop, began: Callable[[], float | None] | None = None
    ) -> None:
        """The run starts now (a child took it): count from here, or, once
        the child says when it began the job (`began`), from then."""
        self.disarm()
        self.started = loop.time()
        self._began = began
        self.arm(loop)

    def arm(self, loop: asyncio.AbstractEventLoop) -> None:
        due = self.due(loop.time())
        if due is not None:
            self._handle = loop.call_at(due, self._fire, loop)

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        due = self.due(now)
        assert due is not None
        if due > now:  # the loop was blocked by others meanwhile: more time
            self._handle = loop.call_at(due, self._fire, loop)
            return
        self._handle = None
        self.running.ctx.cancelled = True
        if self.running.scope is not None:
            self.running.scope.reschedule(now)

    def disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def overran(self, now: float) -> bool:
        """The run ended past its deadline without being cancelled: it did
        not give the loop back in time."""
        due = self.due(now)
        return due is not None and now > due and not self.running.ctx.cancelled


async def _thread_end(running: Running) -> None:
    """Wait for a sync handler's thread to return, however the run ended:
    until then its slot stays taken and its outcome unwritten."""
    thread = running.thread
    assert thread is not None
    if not thread.done():
        running.ctx.cancelled = True
        log.warning(
            "job %s: its thread runs on past the end of its run (a thread cannot be "
            "stopped); its slot is held until it returns (check current_job().cancelled)",
            running.ctx.id,
        )
        await asyncio.wait([asyncio.wrap_future(thread)])
    running.thread = None


def _start(
    running: Running,
    loop: asyncio.AbstractEventLoop,
    executor: Executor,
    processes: Processes | None,
) -> tuple[bool, Any]:
    """Start the handler: (True, its result) if it finished at once, else
    (False, an awaitable of the rest). An async handler is started by hand:
    most finish without suspending, and those need no timer (arming and
    cancelling one costs about as much as the rest of a no-op job)."""
    handler = running.handler
    assert handler is not None
    fn = handler.fn
    data = running.ctx.data
    if handler.executor is None and handler.is_async and not running.isolated:  # the common path
        coro = fn(data)
        if type(coro) is not types.CoroutineType:  # some other awaitable: awaited as it is
            return False, coro
        try:
            suspended_on = coro.send(None)
        except StopIteration as done:
            return True, done.value
        return False, _resume(coro, suspended_on)
    if running.isolated or handler.executor == "process" or (
        handler.executor is None and processes is not None and processes.runs_sync
    ):
        if processes is None:
            raise ConfigurationError("this worker runs no child processes")
        running.in_process = True
        return False, processes.run(running)
    # A thread of the pool, with a copy of this context: current_job() works there too.
    context = contextvars.copy_context()
    target = functools.partial(_run_coroutine, fn) if handler.is_async else fn
    running.thread = executor.submit(context.run, target, data)
    return False, asyncio.wrap_future(running.thread, loop=loop)


def _run_coroutine(fn: Callable[[Any], Any], data: Any) -> Any:
    """An async handler told to run on a thread: on an event loop of its own."""
    return asyncio.run(fn(data))


@types.coroutine
def _resume(coro: Coroutine[Any, Any, Any], suspended_on: Any) -> Generator[Any, Any, Any]:
    """Drive on a coroutine that was started by hand and suspended on
    `suspended_on`, from the awaiting task: what the task sends or throws in
    (a timeout's or a lost lease's cancellation too) goes on to the handler."""
    while True:
        try:
            sent = yield suspended_on
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            try:
                suspended_on = coro.throw(exc)
            except StopIteration as done:
                return done.value
        else:
            try:
                suspended_on = coro.send(sent)
            except StopIteration as done:
                return done.value

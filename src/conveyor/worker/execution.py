"""Running one claimed job's handler and turning what happened into an outcome."""

from __future__ import annotations

import asyncio
import contextvars
import traceback
import types
from collections.abc import Callable, Coroutine, Generator
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from conveyor import serializers
from conveyor.client.tasks import Task
from conveyor.errors import (
    JobTimeoutError,
    NotSerializableError,
    PermanentError,
    RateLimited,
    ResumeLater,
)
from conveyor.timeutil import delay_until_ms
from conveyor.worker.context import JobContext, set_current

MAX_ERROR_TEXT = 8 * 1024


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
    failure: Failure | None = None  # kept for the hooks told when the failure is written


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


Outcome = Success | Failure | Limited | Deferred | None  # None: lease lost, nothing to write


def describe(exc: BaseException) -> str:
    """`Type: message` plus the traceback, bounded in size."""
    text = "".join(traceback.format_exception(exc)).strip()
    head = f"{type(exc).__name__}: {exc}"
    return (head + "\n" + text)[:MAX_ERROR_TEXT]


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
    running: Running, executor: Executor | None, on_suspend: Callable[[], None]
) -> Outcome:
    """Run the handler under its timeout; never raises but CancelledError.
    `on_suspend` is called once if the handler does not finish at once: it
    then runs on under its deadline, counted from its start, so a timeout or
    a lost lease (Running.scope) can still cancel it."""
    if running.problem is not None:
        return Failure(running.problem, True, None)
    set_current(running.ctx)
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        finished, result = _start(running, loop, executor)
        if not finished:
            on_suspend()
            deadline = None if running.timeout is None else started + running.timeout
            async with asyncio.timeout_at(deadline) as scope:
                running.scope = scope
                result = await result
        if result is None:
            return NOTHING
        return Success(serializers.dumps(result, what="the result"))
    except TimeoutError as exc:
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
        set_current(None)


def _start(
    running: Running, loop: asyncio.AbstractEventLoop, executor: Executor | None
) -> tuple[bool, Any]:
    """Start the handler: (True, its result) if it finished at once, else
    (False, an awaitable of the rest). An async handler is started by hand:
    most finish without suspending, and those need no timer (arming and
    cancelling one costs about as much as the rest of a no-op job)."""
    assert running.handler is not None
    fn = running.handler.fn
    data = running.ctx.data
    if not running.handler.is_async:
        # Sync handlers run in the pool with a copy of this context, so
        # current_job() works there too.
        context = contextvars.copy_context()
        return False, loop.run_in_executor(executor, context.run, fn, data)
    coro = fn(data)
    if type(coro) is not types.CoroutineType:  # some other awaitable: awaited as it is
        return False, coro
    try:
        suspended_on = coro.send(None)
    except StopIteration as done:
        return True, done.value
    return False, _resume(coro, suspended_on)


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

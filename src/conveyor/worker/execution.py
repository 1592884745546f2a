"""Running one claimed job's handler and turning what happened into an outcome."""

from __future__ import annotations

import asyncio
import contextvars
import traceback
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from conveyor import serializers
from conveyor.client.tasks import Task
from conveyor.errors import JobTimeoutError, NotSerializableError, PermanentError
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


@dataclass(frozen=True, slots=True)
class Success:
    result: str


@dataclass(frozen=True, slots=True)
class Failure:
    error: str
    permanent: bool
    retry_delay_ms: int | None


Outcome = Success | Failure | None  # None: lease lost, nothing to write


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


def failure_of(exc: BaseException) -> Failure:
    permanent = isinstance(exc, PermanentError | NotSerializableError)
    return Failure(describe(exc), permanent, _retry_delay(exc))


async def _call(running: Running, executor: Executor | None) -> Any:
    assert running.handler is not None
    fn = running.handler.fn
    data = running.ctx.data
    if running.handler.is_async:
        return await fn(data)
    # Sync handlers run in the pool with a copy of this context, so
    # current_job() works there too.
    context = contextvars.copy_context()
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(executor, context.run, fn, data)


async def execute(running: Running, executor: Executor | None) -> Outcome:
    """Run the handler under its timeout; never raises but CancelledError."""
    if running.problem is not None:
        return Failure(running.problem, True, None)
    set_current(running.ctx)
    try:
        async with asyncio.timeout(running.timeout) as scope:
            running.scope = scope
            result = await _call(running, executor)
        if result is None:  # the common case of handlers with nothing to return
            return Success("null")
        return Success(serializers.dumps(result, what="the result"))
    except TimeoutError as exc:
        if running.ctx.lost:
            return None
        if running.scope is not None and running.scope.expired():
            err = JobTimeoutError(f"timed out after {running.timeout} s")
            return Failure(describe(err), False, None)
        return failure_of(exc)
    except Exception as exc:
        return None if running.ctx.lost else failure_of(exc)
    finally:
        running.scope = None
        set_current(None)

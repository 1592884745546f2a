"""A child process of process execution (processes.ProcessPool): it runs the
orders its parent sends over a pipe, one after another, and sends back each
job's reports and outcome. It never touches Redis for the job: the parent
keeps the lease and writes everything.

Kept apart from the parent's side so that the forkserver preloads only what a
child needs.
"""

from __future__ import annotations

import asyncio
import importlib
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from conveyor import serializers
from conveyor.client.tasks import Tasks
from conveyor.worker.context import JobContext, set_current
from conveyor.worker.execution import NOTHING, Ended, Failure, Success, failure_of


@dataclass(frozen=True, slots=True)
class Order:
    """What a child needs to run one job: where the handler is, and the job."""

    module: str
    task: str
    failures: bool  # the handler is the task's failure handler
    job: dict[str, Any]  # JobContext's fields but report_progress


# a child's shared state: the last order it has passed (begun or skipped), one taken back,
# and when it began the last one it passed (time.monotonic_ns(): the host's monotonic clock)
PASSED, WITHDRAWN, BEGUN_NS = 0, 1, 2
DEPTH = 2  # jobs sent to a child at once: the one it runs and the next, waiting in its pipe


def child_main(conn: Connection, state: Any, max_tasks: int | None, max_memory: int | None) -> None:
    """A child's life: run orders until told to stop (None) or orphaned, or
    until a limit says it must be recycled (then it leaves on its own, and an
    order already sent to it goes back to the parent's line, never begun)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    handlers: dict[tuple[str, str, bool], Callable[[Any], Any]] = {}
    done = 0
    while True:
        try:
            sent = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if sent is None:
            return
        seq, *fields = sent
        order = Order(*fields)
        found = _handler(order, handlers)  # its module imported first: not the job's time
        with state.get_lock():  # against the parent's taking it back (Child.withdraw)
            state[PASSED] = seq
            if state[WITHDRAWN] == seq:
                continue
            state[BEGUN_NS] = time.monotonic_ns()  # its timeout counts from here
        outcome = _run_order(order, found, conn)
        done += 1
        peak = _peak_rss()
        leaving = (max_tasks is not None and done >= max_tasks) or (
            max_memory is not None and peak > max_memory
        )
        # the common outcome as None: a dataclass pickles field by field, slowly
        conn.send(("done", None if outcome is NOTHING else outcome, peak, leaving))
        if leaving:
            return


def _handler(
    order: Order, handlers: dict[tuple[str, str, bool], Callable[[Any], Any]]
) -> Callable[[Any], Any] | Exception:
    """The order's handler (found once per child), or why it cannot be found."""
    key = (order.module, order.task, order.failures)
    found = handlers.get(key)
    if found is None:
        try:
            found = handlers[key] = _find_handler(order)
        except Exception as exc:  # the run fails with it, as if the handler had raised it
            return exc
    return found


def _run_order(order: Order, fn: Callable[[Any], Any] | Exception, conn: Connection) -> Ended:
    ctx = JobContext(
        **order.job,
        report_progress=lambda _, fraction: conn.send(("progress", fraction)),
        report_log=lambda _, lines: conn.send(("log", lines)),
        report_checkpoint=lambda _, state: conn.send(("checkpoint", state)),
    )
    set_current(ctx)
    try:
        if isinstance(fn, Exception):
            raise fn
        result = fn(ctx.data)
        if asyncio.iscoroutine(result):
            result = asyncio.run(result)
        if result is None:
            return NOTHING
        return Success(serializers.dumps(result, what="the result"))
    except Exception as exc:  # the exception stays here: its text and kind cross the pipe
        outcome = failure_of(exc)
        if isinstance(outcome, Failure):  # without the exception object: it may not pickle
            return Failure(outcome.error, outcome.permanent, outcome.retry_delay_ms)
        return outcome  # RateLimited / ResumeLater: plain values that cross the pipe
    finally:
        set_current(None)


def _find_handler(order: Order) -> Callable[[Any], Any]:
    """The handler, found again in the child: the `Tasks` of the handler's
    module that registered it (tasks must be defined at module level)."""
    module = importlib.import_module(order.module)
    for value in list(vars(module).values()):
        if isinstance(value, Tasks):
            table = value.failure_handlers if order.failures else value.handlers
            if order.task in table:
                return table[order.task].fn
    raise LookupError(
        f"task {order.task!r} not found in a module-level Tasks of module {order.module!r}: "
        "process execution needs handlers defined at module level"
    )


def _peak_rss() -> int:
    """This process's peak resident memory, in bytes."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # KiB on Linux

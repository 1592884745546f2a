"""The text a failed run stores as its error: `Type: message` and the traceback, bounded.

The traceback is the standard library's (`traceback.format_exception`), column carets
included, from the handler's frame down: the worker's own frames above it (the runtime that
called the handler, `conveyor/worker/`, and the thread pool that runs a sync one) are left
out, since they say nothing about the failure.
It is also where most of the cost was: to place a frame's carets the standard library walks
its code object's positions up to the failing instruction (about a quarter of a millisecond
for the executor's longest function), and it parses the frame's source line (`ast.parse`).
The second cost is paid once per place in the code: a handler that fails again, as a retried
one does while its dependency is down, fails at the same places, and their text comes from a
bounded cache of frames keyed by everything the text is made of (the place, the frame's source
lines, the formatting options), so a changed source line is formatted anew.
"""

from __future__ import annotations

import linecache
import os
import traceback
import types
from collections.abc import Iterator
from concurrent.futures import thread
from functools import lru_cache
from typing import Any

__all__ = ["MAX_ERROR_TEXT", "describe"]

MAX_ERROR_TEXT = 8 * 1024
FRAMES_KEPT = 512  # distinct places whose frame text is kept
WORKER_CODE = os.path.dirname(os.path.abspath(__file__))  # the worker's own frames
# the frame of the thread pool that runs a sync handler, above the handler's own (a private
# name of concurrent.futures: where a Python lacks it, that frame is simply kept)
THREAD_POOL_RUN = getattr(
    getattr(getattr(thread, "_WorkItem", None), "run", None), "__code__", None
)


def describe(exc: BaseException) -> str:
    """`Type: message` plus the traceback, bounded in size."""
    summary = traceback.TracebackException(type(exc), exc, _from_handler(exc.__traceback__))
    for part in _chain(summary):
        part.stack = _KnownFrames(part.stack)  # from_list would make a plain StackSummary
    text = "".join(summary.format()).strip()
    head = f"{type(exc).__name__}: {exc}"
    return (head + "\n" + text)[:MAX_ERROR_TEXT]


def _from_handler(tb: types.TracebackType | None) -> types.TracebackType | None:
    """`tb` from its first frame that is not the worker's own (its runtime, or the thread
    pool that runs a sync handler), or whole when all are (a failure of the worker itself)."""
    first = tb
    while first is not None and _calls_handlers(first.tb_frame.f_code):
        first = first.tb_next
    return tb if first is None else first


def _calls_handlers(code: types.CodeType) -> bool:
    return code is THREAD_POOL_RUN or _is_worker_file(code.co_filename)


@lru_cache(maxsize=FRAMES_KEPT)
def _is_worker_file(filename: str) -> bool:
    return os.path.dirname(os.path.abspath(filename)) == WORKER_CODE


def _chain(summary: traceback.TracebackException) -> Iterator[traceback.TracebackException]:
    """`summary` and every exception it tells of: causes, contexts, a group's members."""
    seen: set[int] = set()
    todo = [summary]
    while todo:
        part = todo.pop()
        if id(part) in seen:
            continue
        seen.add(id(part))
        yield part
        todo += [p for p in (part.__cause__, part.__context__) if p is not None]
        todo += getattr(part, "exceptions", None) or []


class _KnownFrames(traceback.StackSummary):
    """A stack whose frames are formatted through the cache."""

    def format_frame_summary(self, frame_summary: traceback.FrameSummary, **kwargs: Any) -> str:
        if frame_summary.locals:  # not captured by describe; never cached
            return str(super().format_frame_summary(frame_summary, **kwargs))
        return _frame_text(_Frame(frame_summary, kwargs))


class _Frame:
    """A frame to format, equal to another by all that its text is made of."""

    __slots__ = ("key", "kwargs", "summary")

    def __init__(self, summary: traceback.FrameSummary, kwargs: dict[str, Any]) -> None:
        first = summary.lineno or 0
        last = getattr(summary, "end_lineno", None) or first
        self.key = (
            summary.filename, summary.name, first, last,
            getattr(summary, "colno", None), getattr(summary, "end_colno", None),
            tuple(linecache.getline(summary.filename, n) for n in range(first, last + 1)),
            summary.line, tuple(sorted(kwargs.items())),
        )  # fmt: skip
        self.summary, self.kwargs = summary, kwargs

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Frame) and self.key == other.key


@lru_cache(maxsize=FRAMES_KEPT)
def _frame_text(frame: _Frame) -> str:
    """The standard library's text of one frame. A pure function of the frame's key: like
    _is_worker_file's, this cache is a memo, which changes no result, only its cost."""
    return str(traceback.StackSummary().format_frame_summary(frame.summary, **frame.kwargs))

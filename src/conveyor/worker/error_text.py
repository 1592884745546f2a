"""The text a failed run stores as its error: `Type: message` and the traceback, bounded.

The traceback is the standard library's, column carets included, with each frame's text
formatted once per place in the code. Python 3.11 and later draw a frame's carets by parsing
its source line (`ast.parse`): for a three-frame chained exception that was about 300 of
the 400 µs of CPU the description took, and the larger part of what a failure cost the
worker (docs/spark-rounds.md, "Round twelve"). A handler that fails again, as a retried one
does while its dependency is down, fails at the same places; their text is taken from a
bounded cache of frames, keyed by everything the text is made of (the place, the frame's
source lines and the formatting options), so a changed source line is formatted anew.
"""

from __future__ import annotations

import linecache
import traceback
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

__all__ = ["MAX_ERROR_TEXT", "describe"]

MAX_ERROR_TEXT = 8 * 1024
FRAMES_KEPT = 512  # distinct places whose frame text is kept


def describe(exc: BaseException) -> str:
    """`Type: message` plus the traceback, bounded in size."""
    summary = traceback.TracebackException.from_exception(exc)
    for part in _chain(summary):
        part.stack = _KnownFrames(part.stack)  # from_list would make a plain StackSummary
    text = "".join(summary.format()).strip()
    head = f"{type(exc).__name__}: {exc}"
    return (head + "\n" + text)[:MAX_ERROR_TEXT]


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
    """The standard library's text of one frame. A pure function of the frame's key, so the
    one cache this module keeps is a memo: it changes no result, only its cost."""
    return str(traceback.StackSummary().format_frame_summary(frame.summary, **frame.kwargs))

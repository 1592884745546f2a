"""The job a handler is running, reachable through a contextvar.

from conveyor.worker import current_job

def resize(data):
    job = current_job()
    job.progress(3, 10)     # or job.progress(0.3)
    if job.cancelled:       # timed out, aborted, lease lost: stop early
        return
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from conveyor.errors import ConveyorError, ValidationError


@dataclass(eq=False)
class JobContext:
    """One claimed run of a job, as its handler sees it."""

    id: str
    queue: str
    task: str
    data: Any
    attempt: int
    token: str
    worker_id: str
    report_progress: Callable[[JobContext, float], None] = field(repr=False)
    lost: bool = False
    # Set when the run is to stop: its timeout passed, its lease was lost, it
    # was aborted, or the worker stops. Async handlers are cancelled and
    # process handlers terminated as well; a sync handler on a thread cannot
    # be stopped from outside, so a long one should check this flag and return.
    cancelled: bool = False
    waited: float | None = None  # s from enqueue to start, first attempts; set for hooks

    def progress(self, done: float, total: float | None = None) -> None:
        """Report progress as a fraction, or as `done` out of `total`."""
        fraction = _fraction(done, total)
        self.report_progress(self, fraction)


def _fraction(done: float, total: float | None) -> float:
    if total is not None:
        if total <= 0:
            raise ValidationError(f"progress total must be > 0, got {total!r}")
        done = done / total
    if not 0.0 <= done <= 1.0:
        raise ValidationError(f"progress must be within [0, 1], got {done!r}")
    return float(done)


_current: ContextVar[JobContext | None] = ContextVar("conveyor_current_job", default=None)


def current_job() -> JobContext:
    """The job being run by the calling handler (sync or async)."""
    job = _current.get()
    if job is None:
        raise ConveyorError("current_job() called outside a running job")
    return job


def set_current(job: JobContext | None) -> None:
    _current.set(job)


@contextmanager
def running(job: JobContext) -> Iterator[JobContext]:
    """Make `job` the current job inside the block, as a worker does around a
    handler: how tests call a handler directly (current_job() works there)."""
    reset = _current.set(job)
    try:
        yield job
    finally:
        _current.reset(reset)

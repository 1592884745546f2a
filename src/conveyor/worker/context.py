"""The job a handler is running, reachable through a contextvar.

from conveyor.worker import current_job

def resize(data):
    job = current_job()
    job.progress(3, 10)     # or job.progress(0.3)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from conveyor import serializers
from conveyor.errors import ConveyorError, ValidationError

CHECKPOINT_MAX = 64 * 1024


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
    waited: float | None = None  # s from enqueue to start, first attempts; set for hooks
    # the resumable state the last run saved (None: start from the beginning), §16.7
    checkpoint: Any = None
    report_checkpoint: Callable[[JobContext, str], None] | None = field(default=None, repr=False)

    def progress(self, done: float, total: float | None = None) -> None:
        """Report progress as a fraction, or as `done` out of `total`."""
        fraction = _fraction(done, total)
        self.report_progress(self, fraction)

    def save_checkpoint(self, state: Any) -> None:
        """Save a small JSON state with the job (at most 64 KiB): a later run of
        it (after a crash, a deploy, a retry or ResumeLater) starts with
        `current_job().checkpoint` = this state. A sync handler waits for the
        write; an async one goes on, and the write lands before its outcome."""
        text = serializers.dumps(state, what="the checkpoint")
        if len(text) * 4 > CHECKPOINT_MAX and len(text.encode()) > CHECKPOINT_MAX:
            raise ValidationError(f"a checkpoint is at most {CHECKPOINT_MAX} bytes of JSON")
        self.checkpoint = state
        if self.report_checkpoint is not None:
            self.report_checkpoint(self, text)


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

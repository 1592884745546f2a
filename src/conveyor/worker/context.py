"""The job a handler is running, reachable through a contextvar.

from conveyor.worker import current_job

def resize(data):
    job = current_job()
    job.progress(3, 10)     # or job.progress(0.3)
    job.log("resized 3 of 10")  # the job's own log
    if job.cancelled:       # timed out, aborted, lease lost: stop early
        return
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol, TypeVar

from conveyor import serializers
from conveyor.client.flows import ChildrenResults, FlowEnqueued, FlowJob
from conveyor.errors import ConveyorError, ValidationError

CHECKPOINT_MAX = 64 * 1024

T = TypeVar("T")


class FlowAccess(Protocol):
    """What a handler may do with flows, done by its worker on its event loop."""

    async def children(self, ctx: JobContext) -> ChildrenResults: ...

    async def add_children(
        self, ctx: JobContext, children: Sequence[FlowJob]
    ) -> list[FlowEnqueued]: ...

    async def wait(self, ctx: JobContext) -> str: ...


class WaitingForChildren(ConveyorError):  # noqa: N818 - raised to end a run, not an error
    """Raised by wait_for_children(): the run ends without an outcome and the
    job runs again once its children have settled. Let it propagate."""


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
    report_log: Callable[[JobContext, list[str]], None] | None = field(default=None, repr=False)
    headers: dict[str, str] | None = None  # given at enqueue (trace context, say)
    # flows: read children, add some, wait for them; run on the worker's event loop
    flows: FlowAccess | None = field(default=None, repr=False)
    loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)
    # the resumable state the last run saved (None: start from the beginning), §16.7
    checkpoint: Any = None
    report_checkpoint: Callable[[JobContext, str], None] | None = field(default=None, repr=False)

    def progress(self, done: float, total: float | None = None) -> None:
        """Report progress as a fraction, or as `done` out of `total`."""
        fraction = _fraction(done, total)
        self.report_progress(self, fraction)

    def log(self, *lines: str) -> None:
        """Append lines to this job's own log (`Queue.job_log(id)`, `conveyor
        log`): its last 1000 lines are kept as long as the job's record. A
        line written after the lease was lost is dropped."""
        if self.report_log is None:
            raise ConveyorError("this job has no log writer")
        texts = [str(line) for line in lines]
        if texts:
            self.report_log(self, texts)

    def _flows(self) -> FlowAccess:
        if self.flows is None:
            raise ConveyorError("this job's worker does not run flows")
        return self.flows

    def _in_worker_loop(self, coroutine: Coroutine[Any, Any, T], name: str) -> T:
        """A sync handler's call (it runs in a pool thread) done on the loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            assert self.loop is not None
            return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()
        coroutine.close()
        raise ConveyorError(f"in an async handler, use: await current_job().{name}_async()")

    async def children_async(self) -> ChildrenResults:
        """A flow parent's children: results by child id, and the errors of
        those that failed under `ignore` (and `fail` / `continue`)."""
        return await self._flows().children(self)

    def children(self) -> ChildrenResults:
        """children_async() for a sync handler."""
        return self._in_worker_loop(self._flows().children(self), "children")

    async def add_children_async(self, children: Sequence[FlowJob]) -> list[FlowEnqueued]:
        """The step-job pattern: give this running job more children (trees,
        in any queue; None as a child's queue means this job's). Then
        wait_for_children_async() ends the run until they have settled."""
        return await self._flows().add_children(self, children)

    def add_children(self, children: Sequence[FlowJob]) -> list[FlowEnqueued]:
        """add_children_async() for a sync handler."""
        return self._in_worker_loop(self._flows().add_children(self, children), "add_children")

    async def wait_for_children_async(self) -> NoReturn:
        """Give up this run's slot until the job's pending children have
        settled; the job then runs again (children_async() has their
        results). Raises WaitingForChildren: let it propagate."""
        outcome = await self._flows().wait(self)
        self.lost = True  # nothing is written for this run: it ended here
        raise WaitingForChildren(f"job {self.id}: {outcome}")

    def wait_for_children(self) -> NoReturn:
        """wait_for_children_async() for a sync handler."""
        outcome = self._in_worker_loop(self._flows().wait(self), "wait_for_children")
        self.lost = True
        raise WaitingForChildren(f"job {self.id}: {outcome}")

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
job_var = _current  # set by the worker around each run (execution.py), without set_current's call
# the task whose batch call runs here (worker/batches.py): no one job is current then
batch_var: ContextVar[str | None] = ContextVar("conveyor_batch_task", default=None)


def current_job() -> JobContext:
    """The job being run by the calling handler (sync or async)."""
    job = _current.get()
    if job is None:
        batch = batch_var.get()
        if batch is not None:
            raise ConveyorError(
                f"current_job() in the batch handler of {batch!r}: one call runs several "
                "jobs, so none is current (each job's data is an entry of the list)"
            )
        raise ConveyorError("current_job() called outside a running job")
    return job


def current_job_or_none() -> JobContext | None:
    """The job being run by the calling code, or None outside a job."""
    return _current.get()


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

"""Hooks: code of yours that runs at the points of a job's life, the way
Sentry, metrics or tracing plug in without patching Conveyor.

    class Alerts(Hook):
        def on_final_failure(self, job: RunningJob, *, error: str) -> None:
            page_someone(job.task, job.id, error)

    tasks = Tasks("emails", settings=QueueSettings(hooks=(Alerts(),)))

Every method is optional (the base class does nothing). Hooks given in
QueueSettings run in the producers (`before_enqueue`) and in the workers of
those settings; `Worker(..., hooks=...)` adds worker-only ones. The job hooks
run in the worker's event loop between jobs: keep them quick and never block.
An exception raised by a hook is logged and swallowed: a broken hook never
fails a job. With no hook installed, neither producers nor workers do any
work for hooks.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from conveyor.errors import ConfigurationError

log = logging.getLogger("conveyor.hooks")


class RunningJob(Protocol):
    """What a hook sees of a job run (conveyor.worker.JobContext)."""

    @property
    def id(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def task(self) -> str: ...
    @property
    def data(self) -> Any: ...
    @property
    def attempt(self) -> int: ...
    @property
    def worker_id(self) -> str: ...
    @property
    def waited(self) -> float | None: ...  # s from enqueue to start, first attempts
    @property
    def headers(self) -> dict[str, str] | None: ...  # given at enqueue (options["headers"])


class Hook:
    """Override the methods you need."""

    def before_enqueue(self, queue: str, task: str, data: Any, options: dict[str, Any]) -> None:
        """Before a job is enqueued (`enqueue`, `enqueue_many`, `Task.enqueue`);
        `options` may be changed here and the enqueue uses them."""

    def after_enqueue(
        self,
        queue: str,
        task: str,
        options: dict[str, Any],
        *,
        job_id: str | None,
        error: BaseException | None,
    ) -> None:
        """After every enqueue whose before_enqueue was called, with the
        same `options`: `job_id` once the job has one, `error` if the enqueue
        raised (then the job may or may not be in Redis: see the error)."""

    def worker_start(self, worker_id: str, queue: str) -> None:
        """A worker connected and is about to claim its first jobs."""

    def worker_stop(self, worker_id: str, queue: str) -> None:
        """A worker has stopped: every outcome is written."""

    def before_run(self, job: RunningJob) -> None:
        """Just before the handler starts (in the handler's context: a
        contextvar set here is seen by the handler)."""

    def after_success(self, job: RunningJob, *, duration: float) -> None:
        """The handler returned; `duration` in seconds. Its outcome is not
        written yet (see on_retry / on_final_failure for failures)."""

    def after_failure(
        self, job: RunningJob, exc: BaseException | None, *, error: str, duration: float
    ) -> None:
        """The handler raised `exc` (None when the job could not run at all:
        an unknown task, undecodable data); `error` is the text stored."""

    def after_stopped(self, job: RunningJob, *, duration: float) -> None:
        """The handler was stopped, and its outcome will not be written: the
        lease was lost, or the worker gave the job back at shutdown."""

    def on_completed(self, job: RunningJob) -> None:
        """The job's success was recorded in Redis."""

    def on_retry(self, job: RunningJob, *, error: str) -> None:
        """A failure was recorded, and the job will run again."""

    def on_final_failure(self, job: RunningJob, *, error: str) -> None:
        """A failure was recorded, and it was the job's last (or permanent)."""

    def on_lease_lost(self, job: RunningJob) -> None:
        """The worker lost the job's lease (it expired, or was taken over)."""

    def on_stalled(self, *, recovered: int, failed: int, queue: str) -> None:
        """This worker's reaper found expired leases in `queue`: `recovered`
        jobs go back to the queue, `failed` stalled too often. Called from the
        heartbeat thread. (A hook written without `queue` is still called.)"""


Bound = tuple[Callable[..., None], ...]


class Hooks:
    """Installed hooks: per event, the methods that hooks override, in
    order, so an event no hook handles costs one falsy test."""

    __slots__ = ("hooks", "before_enqueue", "after_enqueue", "worker_start", "worker_stop",
                 "before_run", "after_success", "after_failure", "after_stopped",
                 "on_completed", "on_retry", "on_final_failure", "on_lease_lost", "on_stalled",
                 "on_enqueue", "on_run", "on_outcome")  # fmt: skip

    def __init__(self, hooks: Sequence[Hook] = ()) -> None:
        for hook in hooks:
            if not isinstance(hook, Hook):
                raise ConfigurationError(f"a hook must be a conveyor.hooks.Hook, got {hook!r}")
        self.hooks = tuple(hooks)
        self.before_enqueue = self._bound("before_enqueue")
        self.after_enqueue = self._bound("after_enqueue")
        self.worker_start = self._bound("worker_start")
        self.worker_stop = self._bound("worker_stop")
        self.before_run = self._bound("before_run")
        self.after_success = self._bound("after_success")
        self.after_failure = self._bound("after_failure")
        self.after_stopped = self._bound("after_stopped")
        self.on_completed = self._bound("on_completed")
        self.on_retry = self._bound("on_retry")
        self.on_final_failure = self._bound("on_final_failure")
        self.on_lease_lost = self._bound("on_lease_lost")
        self.on_stalled = tuple(_with_queue(m) for m in self._bound("on_stalled"))
        # whether any hook wants to hear about an enqueue, a run, a written outcome
        self.on_enqueue = bool(self.before_enqueue or self.after_enqueue)
        self.on_run = bool(
            self.before_run or self.after_success or self.after_failure or self.after_stopped
        )
        self.on_outcome = bool(
            self.on_completed or self.on_retry or self.on_final_failure or self.on_lease_lost
        )

    def _bound(self, event: str) -> Bound:
        base = getattr(Hook, event)
        return tuple(getattr(h, event) for h in self.hooks if getattr(type(h), event) is not base)

    def __bool__(self) -> bool:
        return bool(self.hooks)


def _with_queue(method: Callable[..., None]) -> Callable[..., None]:
    """An on_stalled written before it was told the queue, called without it."""
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return method
    if "queue" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return method

    def without_queue(*, recovered: int, failed: int, queue: str) -> None:
        method(recovered=recovered, failed=failed)

    return without_queue


def call(methods: Bound, *args: Any, **kwargs: Any) -> None:
    """Call each hook method; one that raises is logged and skipped."""
    for method in methods:
        try:
            method(*args, **kwargs)
        except Exception:
            failed(method)


def failed(method: Callable[..., None]) -> None:
    """Log the exception a hook method raised (it is ignored)."""
    log.exception("hook %s failed; ignored", getattr(method, "__qualname__", method))

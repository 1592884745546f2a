"""The one exception tree. Every error Conveyor raises derives from ConveyorError.

ConveyorError
├── ValidationError (also ValueError)       bad input; nothing was written
│   ├── InvalidNameError                    queue name, prefix, task name
│   ├── InvalidJobIdError
│   ├── PayloadTooLargeError
│   ├── NotSerializableError                data or result is not JSON
│   ├── UnknownOptionError (also TypeError)
│   ├── DuplicateChildError                 a flow names one id twice under a parent
│   └── NotASuspectError                    release/fail_suspect of a job that is not one
├── GroupFullError                          a group is at its max_waiting: the job was refused
├── ConfigurationError                      bad settings (URL, missing Redis binary ...)
├── ServerError                             the Redis server cannot be used
│   ├── UnsupportedServerError              older than Redis 6.2
│   ├── EvictionPolicyError                 maxmemory-policy is not noeviction
│   ├── ProtocolVersionError                the queue was written by another protocol version
│   ├── MigrationRefusedError               migrate: workers of the old version answer the roll call
│   └── OutOfMemoryError                    maxmemory reached: the write was refused
├── ConnectionLostError                     Redis unreachable
│   └── UncertainWriteError                 sent, no reply: the write may have been applied
│       └── UnreplicatedWriteError          applied, but WAIT saw too few replicas get it
├── JobNotFoundError (also KeyError)
├── WorkerNotFoundError (also KeyError)     quiet / stop: no live worker with that id
├── JobFailedError                          wait_result(): the job failed for good
│   ├── JobExpiredError                     ... without running: not started by its `expires`
│   ├── ChildFailedError                    ... because a child failed under on_fail="fail"
│   ├── JobCancelledError                   a flow child cancelled or removed before it ran
│   └── FlowConflictError                   a flow child whose id was in use: never created
├── WaitTimeoutError (also TimeoutError)    wait_result(): no outcome within the timeout
├── LeaseLostError                          a worker's write was refused (fencing)
├── JobTimeoutError (also TimeoutError)     a handler ran past its timeout
├── ProcessDiedError                        the child process running a job died
├── AbortedError                            a running job was aborted (Queue.abort)
├── PermanentError                          raised by a handler: fail now, never retry
├── RateLimited                             raised by a handler: an external limit; back unpunished
└── ResumeLater                             raised by a handler: back to delayed, no attempt counted
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any


class ConveyorError(Exception):
    """Root of every error Conveyor raises."""


class ValidationError(ConveyorError, ValueError):
    """Bad input, detected before anything was written to Redis."""


class InvalidNameError(ValidationError):
    pass


class InvalidJobIdError(ValidationError):
    pass


class PayloadTooLargeError(ValidationError):
    pass


class NotSerializableError(ValidationError):
    pass


class UnknownOptionError(ValidationError, TypeError):
    pass


class DuplicateChildError(ValidationError):
    """A flow names one job id twice under one parent (in one queue or in
    several), or one node (`<queue>/<id>`) twice anywhere: a parent's
    children are told apart by their ids, so the whole flow is refused and
    nothing of it is written (docs/protocol.md §14.2)."""


class ConfigurationError(ConveyorError):
    pass


class ServerError(ConveyorError):
    pass


class UnsupportedServerError(ServerError):
    pass


class EvictionPolicyError(ServerError):
    pass


class ProtocolVersionError(ServerError):
    """`found`: the version the queue's meta carries ('' when none)."""

    def __init__(self, message: str, *, found: str = "") -> None:
        super().__init__(message)
        self.found = found


class MigrationRefusedError(ServerError):
    """Queue.migrate() changed nothing: workers of the old version are live."""


class OutOfMemoryError(ServerError):
    pass


class ConnectionLostError(ConveyorError):
    """Redis could not be reached; the operation was not applied."""


class UncertainWriteError(ConnectionLostError):
    """The command was sent but no reply came: it may or may not have been
    applied. An enqueue has already been re-sent by the client with the same
    request id (a re-send of an applied call changes nothing) before this is
    raised. Enqueueing again yourself is a new call: safe for a job that has
    not started; for a job already running it waits as its blocked twin and
    runs again after (the singleton rule)."""


class UnreplicatedWriteError(UncertainWriteError):
    """With QueueSettings(min_replicas=N): the write was applied on the master,
    but WAIT did not see N replicas acknowledge it within replica_timeout. It
    survives unless the master fails before a replica gets it; the client has
    already re-sent an enqueue (and waited again) before raising this.
    `replies`: the master's replies to the calls that were sent (what was applied)."""

    def __init__(self, message: str, replies: list[Any] | None = None) -> None:
        super().__init__(message)
        self.replies = replies


class JobNotFoundError(ConveyorError, KeyError):
    pass


class NotASuspectError(ValidationError):
    """Queue.release_suspect / fail_suspect of a job that is not a suspect: it
    never stalled, an operator released it already, or it has finished."""


class WorkerNotFoundError(ConveyorError, KeyError):
    """No live worker with that id serves the queue (Queue.quiet_worker / stop_worker)."""

    def __str__(self) -> str:  # KeyError's would quote the message
        return str(self.args[0]) if self.args else ""


class JobFailedError(ConveyorError):
    """The awaited job failed for good; `error` is its last error text,
    `error_type` the name of the error that failed it (`ValueError`,
    `JobTimeoutError`, `ChildFailedError` ...: the text's leading `Type:`,
    docs/protocol.md §4.1), `cause` the failure that caused it (a parent's
    child's, for ChildFailedError) or None. `failure_of` builds the most
    specific class for a stored error text."""

    def __init__(self, job_id: str, error: str) -> None:
        super().__init__(f"job {job_id!r} failed: {error}")
        self.job_id = job_id
        self.error = error
        self.error_type = error_type(error)
        self.cause: JobFailedError | None = None


class JobExpiredError(JobFailedError):
    """The awaited job was not started by its deadline (the `expires` option):
    it failed without running (docs/protocol.md §16.2)."""

    PREFIX = "JobExpiredError:"


class ChildFailedError(JobFailedError):
    """A parent failed because one of its children failed for good under
    `on_fail="fail"` (docs/protocol.md §14.6). `child` is that child's
    reference `<queue>/<id>`; `cause` its own failure, typed (a
    JobCancelledError, a FlowConflictError, a ChildFailedError one level
    down, or a JobFailedError with the handler's `error_type`)."""

    def __init__(self, job_id: str, error: str) -> None:
        super().__init__(job_id, error)
        match = _CHILD_FAILED.match(error)
        self.child = match.group(1) if match else ""
        if match:
            self.cause = failure_of(self.child.partition("/")[2], match.group(2))


class JobCancelledError(JobFailedError):
    """A flow child was cancelled or removed before it ran: the failure its
    parent is handed, under the child's `on_fail` (docs/protocol.md §14.9)."""


class FlowConflictError(JobFailedError):
    """A flow child was not created: its id was in use under another parent
    or as a job of its own. Its parent is handed this failure, so it never
    waits for it (docs/protocol.md §14.3)."""


_CHILD_FAILED = re.compile(r"ChildFailedError: child (\S+) failed: (.*)\Z", re.DOTALL)
_ERROR_TYPE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*):")
_FAILURES: dict[str, type[JobFailedError]] = {
    "JobExpiredError": JobExpiredError,
    "ChildFailedError": ChildFailedError,
    "JobCancelledError": JobCancelledError,
    "CancelledError": JobCancelledError,  # the text of protocol 4 records before the rename
    "FlowConflictError": FlowConflictError,
}


def error_type(error: str | None) -> str | None:
    """The type name an error text starts with (`Type: message`), or None."""
    match = _ERROR_TYPE.match(error or "")
    return match.group(1) if match else None


def failure_of(job_id: str, error: str) -> JobFailedError:
    """The JobFailedError (its most specific subclass) of a job that failed
    for good with the stored error text `error`."""
    return _FAILURES.get(error_type(error) or "", JobFailedError)(job_id, error)


def expired_error(expires_at_ms: int) -> str:
    """The error text of a job claimed past its deadline (docs/protocol.md §16.2)."""
    return f"{JobExpiredError.PREFIX} not started by its deadline (expires_at {expires_at_ms} ms)"


class WaitTimeoutError(ConveyorError, TimeoutError):
    pass


class LeaseLostError(ConveyorError):
    """A worker's write for a run was refused: its lease was lost (fencing)."""


class JobTimeoutError(ConveyorError, TimeoutError):
    pass


class ProcessDiedError(ConveyorError):
    """The child process that ran a job (process execution) died while it
    ran: killed, crashed, `os._exit`, out of memory. The job is retried by
    its policy; the worker replaced the child."""


class AbortedError(ConveyorError):
    """A client aborted the job while it ran (`Queue.abort`): its worker
    stopped the handler and failed the run for good, without retries."""


class PermanentError(ConveyorError):
    """Raise from a handler to fail the job at once, without retries.

    Any exception may also carry `retry_at` (a datetime, or seconds since the
    epoch) to choose when the retry runs instead of the exponential backoff.
    """

    retry_at: datetime | float | None = None


class RateLimited(ConveyorError):
    """Raise from a handler that hit an external limit (an HTTP 429, say): the
    job goes back to wait with no failure counted, and its queue (scope
    "queue") or its group (scope "group"; the queue for an ungrouped job)
    starts nothing for `retry_after` seconds (docs/protocol.md §16.4)."""

    def __init__(self, retry_after: float, *, scope: str = "queue") -> None:
        if isinstance(retry_after, bool) or not isinstance(retry_after, int | float):
            raise ValidationError(f"retry_after must be seconds, got {retry_after!r}")
        if not 0.001 <= retry_after <= 86_400:
            raise ValidationError(f"retry_after must be in [0.001, 86400] s, got {retry_after!r}")
        if scope not in ("queue", "group"):
            raise ValidationError(f"scope must be 'queue' or 'group', got {scope!r}")
        super().__init__(f"rate limited for {retry_after} s ({scope})")
        self.retry_after = retry_after
        self.scope = scope


class GroupFullError(ConveyorError):
    """A new job of a group that is at its `max_waiting` was refused (nothing
    of it was written). `refused` are those jobs' ids; `results` every job's
    outcome of the call (the others were enqueued)."""

    def __init__(self, refused: list[str], results: list[Any]) -> None:
        super().__init__(f"{len(refused)} job(s) refused: their group is full ({refused[:5]})")
        self.refused = refused
        self.results = results


_KEEP = object()


class ResumeLater(ConveyorError):
    """Raise from a handler to move the job back to wait `delay` seconds
    (0: waiting at once) without holding a worker slot and without counting
    an attempt or a failure; with `checkpoint`, that state is saved first.
    The next run starts with `current_job().checkpoint` (docs/protocol.md §16.7)."""

    def __init__(self, delay: float = 0.0, *, checkpoint: Any = _KEEP) -> None:
        if isinstance(delay, bool) or not isinstance(delay, int | float) or not delay >= 0:
            raise ValidationError(f"delay must be seconds >= 0, got {delay!r}")
        if delay > 10 * 365 * 86_400:
            raise ValidationError(f"delay is more than ten years: {delay!r}")
        super().__init__(f"resume in {delay} s")
        self.delay = delay
        self.checkpoint = checkpoint

    @property
    def saves_checkpoint(self) -> bool:
        return self.checkpoint is not _KEEP

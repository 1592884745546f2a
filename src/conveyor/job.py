"""The typed job record, read back from a job's Redis hash."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from conveyor import serializers
from conveyor.errors import error_type
from conveyor.protocol.ops import text
from conveyor.protocol.record import RECORD_DEFAULTS, record_data
from conveyor.timeutil import from_ms


class JobState(enum.StrEnum):
    WAITING = "waiting"
    DELAYED = "delayed"
    ACTIVE = "active"
    COMPLETED = "completed"
    FAILED = "failed"
    BLOCKED = "blocked"
    WAITING_CHILDREN = "waiting_children"


FINISHED_STATES = frozenset({JobState.COMPLETED, JobState.FAILED})
SUSPECT_STATES = frozenset({JobState.WAITING, JobState.DELAYED, JobState.ACTIVE})


@dataclass(frozen=True, slots=True)
class AttemptError:
    """The error of one failed (or stalled) run, from a job's attempt history."""

    attempt: int
    at: datetime  # when the run ended
    error: str
    kind: str = "failed"  # failed | stalled
    started_at: datetime | None = None  # None: written by an older peer
    worker: str | None = None


@dataclass(frozen=True, slots=True)
class Job:
    """A snapshot of one job. Times are aware UTC datetimes; durations seconds."""

    id: str
    queue: str
    state: JobState
    task: str
    data: Any
    priority: int
    attempts: int
    failures: int
    stalls: int
    max_failures: int
    max_stalls: int
    min_backoff: float
    max_backoff: float
    timeout: float
    result_ttl: float
    progress: float | None
    result: Any
    error: str | None
    worker: str | None
    group: str | None
    created_at: datetime | None
    run_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    # flows (docs/protocol.md §14): the parent's reference `<queue>/<id>`, if
    # any, and what this job's failure does to it; how many children it has
    parent: str | None = None
    on_fail: str = "fail"
    children: int = 0
    # a finished job's record reads as gone from this moment (finished_at + result_ttl)
    retained_until: datetime | None = None
    # the deadline of a job enqueued with `expires`: not started by then, it fails unrun
    expires_at: datetime | None = None
    # the errors of the last runs that failed or stalled, oldest first (at most 10)
    errors: tuple[AttemptError, ...] = ()
    # the resumable state its handler saved last (save_checkpoint, ResumeLater)
    checkpoint: Any = None
    # an operator released it (Queue.release_suspect): it runs as any job until it stalls again
    trusted: bool = False
    # the headers given at enqueue (trace context: docs/protocol.md §15)
    headers: dict[str, str] | None = None

    @property
    def trace_id(self) -> str | None:
        """The OpenTelemetry trace id of the enqueue (its W3C `traceparent`), if any."""
        parts = (self.headers or {}).get("traceparent", "").split("-")
        return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES

    @property
    def error_type(self) -> str | None:
        """The name of the error that failed the latest run (`ValueError`,
        `JobTimeoutError`; for a parent a child failed, `ChildFailedError`):
        the leading `Type:` of `error` (docs/protocol.md §4.1), or None."""
        return error_type(self.error)

    @property
    def suspect(self) -> bool:
        """Its last worker died with it (docs/protocol.md §6.2): until it ends, each
        run is isolated in a child process of its own, one per worker, unless an
        operator released it."""
        return self.stalls > 0 and not self.trusted and self.state in SUSPECT_STATES


def _int(raw: Mapping[str, str], name: str) -> int:
    """A numeric field; a record leaves out those that hold their default."""
    default = RECORD_DEFAULTS.get(name, 0)
    try:
        return int(raw.get(name, default))
    except ValueError:
        return default


def _ms(raw: Mapping[str, str], name: str) -> int | None:
    value = raw.get(name)
    return None if value is None else int(value)


def _state(value: str | None) -> JobState:
    """A record with no valid state is corrupt: show it as failed."""
    try:
        return JobState(value or "")
    except ValueError:
        return JobState.FAILED


def _json_or_text(value: str | None) -> Any:
    if value is None:
        return None
    try:
        return serializers.loads(value)
    except ValueError:
        return value


def _history(value: str | None) -> tuple[AttemptError, ...]:
    """The record's `errors` field (docs/protocol.md §16.1); unreadable: none."""
    if not value:
        return ()
    try:
        entries = serializers.loads(value)
        return tuple(_attempt_error(e) for e in entries)
    except (ValueError, TypeError, KeyError, AttributeError):
        return ()


def _headers(value: str | None) -> dict[str, str] | None:
    """The record's `headers` field, a JSON object of text; unreadable: none."""
    if not value:
        return None
    try:
        found = serializers.loads(value)
    except ValueError:
        return None
    if not isinstance(found, dict):
        return None
    return {str(k): str(v) for k, v in found.items()}


def job_from_hash(queue: str, job_id: str, raw_hash: Mapping[Any, Any]) -> Job:
    """Build a Job from HGETALL output (bytes or str keys and values); data stored in
    pieces (`data`, `data2`, ...) is joined."""
    raw = {text(k): text(v) for k, v in raw_hash.items()}
    progress = raw.get("progress")
    state = _state(raw.get("state"))
    finished_at = _ms(raw, "finished_at")
    retained_until = None
    if state in FINISHED_STATES and finished_at is not None:
        retained_until = from_ms(finished_at + _int(raw, "result_ttl"))
    return Job(
        id=job_id,
        queue=queue,
        state=state,
        task=raw.get("task", ""),
        data=_json_or_text(record_data(raw)),
        priority=_int(raw, "priority"),
        attempts=_int(raw, "attempts"),
        failures=_int(raw, "failures"),
        stalls=_int(raw, "stalls"),
        max_failures=_int(raw, "max_failures"),
        max_stalls=_int(raw, "max_stalls"),
        min_backoff=_int(raw, "min_backoff") / 1000,
        max_backoff=_int(raw, "max_backoff") / 1000,
        timeout=_int(raw, "timeout") / 1000,
        result_ttl=_int(raw, "result_ttl") / 1000,
        progress=None if progress is None else float(progress),
        result=_json_or_text(raw.get("result")),
        error=raw.get("error"),
        worker=raw.get("worker"),
        group=raw.get("group") or None,
        created_at=from_ms(_ms(raw, "created_at")),
        run_at=from_ms(_ms(raw, "run_at" if "run_at" in raw else "created_at")),
        started_at=from_ms(_ms(raw, "started_at")),
        finished_at=from_ms(finished_at),
        retained_until=retained_until,
        expires_at=from_ms(_ms(raw, "expires_at")),
        errors=_history(raw.get("errors")),
        checkpoint=_json_or_text(raw.get("checkpoint")),
        headers=_headers(raw.get("headers")),
        parent=raw.get("parent"),
        on_fail=raw.get("on_fail") or "fail",
        children=_int(raw, "children"),
        trusted=raw.get("trusted") == "1",
    )


def _attempt_error(entry: Mapping[str, Any]) -> AttemptError:
    started = int(entry.get("started") or 0)
    return AttemptError(
        int(entry["attempt"]),
        datetime.fromtimestamp(int(entry["at"]) / 1000, UTC),
        str(entry["error"]),
        kind="stalled" if entry.get("kind") == "stalled" else "failed",
        started_at=datetime.fromtimestamp(started / 1000, UTC) if started else None,
        worker=str(entry.get("worker") or "") or None,
    )

"""The client's value types: queue settings, enqueue options and what calls return.

I/O-free and free of QueueCore, so that code which only configures a queue or reads a reply
(the worker's courier, the integrations, the tests) needs nothing more.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, TypedDict

from conveyor.errors import ConfigurationError
from conveyor.hooks import Hook
from conveyor.job import JobState
from conveyor.options import DEFAULT_MAX_PAYLOAD, JobDefaults, RunAtRule

__all__ = [
    "SCHEDULE_OPTIONS",
    "SKIP_OPTIONS",
    "EnqueueOptions",
    "Enqueued",
    "EvictionCheck",
    "IfExists",
    "JobRequest",
    "QueueSettings",
    "ScheduleInfo",
    "WorkerInfo",
]

EvictionCheck = Literal["error", "warn", "ignore"]
# enqueue_many's rule for a given id that is already a job: "update" applies
# enqueue's upsert rules (the default), "skip" leaves that job alone (enqueue_skip)
IfExists = Literal["update", "skip"]
# The options a job of enqueue_many(..., if_exists="skip") may take: the record
# options enqueue_skip.lua writes (docs/protocol.md §6.1)
SKIP_OPTIONS = frozenset(
    {"id", "priority", "max_failures", "max_stalls", "min_backoff", "max_backoff", "timeout",
     "result_ttl"}
)  # fmt: skip


class EnqueueOptions(TypedDict, total=False):
    """The keyword-only options of an enqueue (see docs/protocol.md)."""

    id: str
    delay: float | timedelta
    run_at: datetime | float
    priority: int | Literal["high", "normal", "low"]
    max_failures: int
    max_stalls: int
    min_backoff: float | timedelta
    max_backoff: float | timedelta
    timeout: float | timedelta
    result_ttl: float | timedelta
    lifo: bool
    group: str
    update_data: bool
    update_run_at: RunAtRule
    update_max_failures: bool
    update_max_stalls: bool
    update_min_backoff: bool
    update_max_backoff: bool
    reset_counts: bool
    index: Mapping[str, str | int]
    headers: Mapping[str, str]
    expires: float | timedelta | datetime
    dedup: str
    dedup_ttl: float | timedelta
    debounce: float | timedelta
    concurrency_keys: Sequence[str]


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueSettings:
    """How a client uses its queue. Unknown keys are an error (dataclass)."""

    prefix: str = "conveyor"
    max_payload: int = DEFAULT_MAX_PAYLOAD
    # entries of the events stream kept (approximately); an entry may name many jobs
    # (a claim, a bulk enqueue): docs/guide/jobs.md, "The events stream"
    events_maxlen: int = 10_000
    eviction_check: EvictionCheck = "error"
    defaults: JobDefaults = field(default_factory=JobDefaults)
    hooks: tuple[Hook, ...] = ()  # conveyor.hooks: run by producers and workers
    # connections of the client's pool: commands running at once (every
    # wait_result of the client shares one); one more fails at once, unsent
    max_connections: int = 100
    # acknowledged writes (enqueues, outcomes, job control) return only once
    # WAIT saw `min_replicas` replicas have them, within `replica_timeout` s,
    # else UnreplicatedWriteError (docs/reliability.md, "Failover")
    min_replicas: int = 0
    replica_timeout: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.max_connections, int) or self.max_connections < 2:
            raise ConfigurationError("max_connections must be an int of at least 2")
        if type(self.min_replicas) is not int or self.min_replicas < 0:
            raise ConfigurationError("min_replicas must be an int of at least 0")
        timeout = self.replica_timeout
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout <= 5
        ):
            # WAIT blocks the connection: it must end well within the socket timeout (10 s)
            raise ConfigurationError("replica_timeout must be a number of seconds in (0, 5]")


@dataclass(frozen=True, slots=True)
class JobRequest:
    """One job of a bulk enqueue."""

    task: str
    data: Any = None
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Enqueued:
    """What an enqueue did: `outcome` is created, updated, blocked, exists or
    deduplicated. A job that was deduplicated (or with `debounce`, updated the
    standing job) reports the id and state of the job that stands for its
    dedup key (state None when that job's record is gone)."""

    id: str
    queue: str
    outcome: str
    state: JobState | None


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A repeatable job: its template, timing and the tick of its pending job."""

    id: str
    task: str
    data: Any
    cron: str | None
    every: float | None
    next_run: datetime | None
    job_id: str | None
    # version 4 (docs/protocol.md §16.6)
    tz: str | None = None
    start: datetime | None = None
    end: datetime | None = None
    max_runs: int | None = None
    runs: int = 0  # the ticks made since this definition, the pending one included
    ended: datetime | None = None  # past its end, or all its runs made
    # the next fire times, from the pending tick on (at most 5; see next_runs)
    upcoming: tuple[datetime, ...] = ()


# The options a schedule's job template may set (timing is the schedule's own).
SCHEDULE_OPTIONS = frozenset(
    {"priority", "max_failures", "max_stalls", "min_backoff", "max_backoff", "timeout",
     "result_ttl", "group"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """One live worker of a queue, as it last announced itself."""

    id: str
    info: dict[str, Any]


@dataclass(frozen=True, slots=True)
class MigrationReport:
    """What Queue.migrate() did: the meta version it found (None: a queue no
    client used) and left, the version 3 rate windows it carried into version
    4's logs, the groups it looked at, the script calls it made, and the jobs
    per state the queue holds after it (read as they are, nothing rewritten)."""

    queue: str
    found: int | None
    version: int
    migrated: bool
    rate_windows: int
    groups: int
    calls: int
    counts: dict[JobState, int]

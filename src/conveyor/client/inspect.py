"""What the operator's views read (a queue's overview, its groups and limits,
a job's recent events, bulk retry and purge), decoded without I/O for both
client shells."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from conveyor.client.events import Event, decode_entries
from conveyor.errors import ValidationError
from conveyor.job import JobState
from conveyor.protocol import ops

# Groups whose settings an overview reads; the counts cover every group.
MAX_GROUPS_SHOWN = 200
# The most recent events a job's history is looked for in (the stream is capped anyway).
EVENTS_SCANNED = 2000
# States `purge` empties: not active (a running job is not removed).
PURGEABLE = (JobState.WAITING, JobState.DELAYED, JobState.COMPLETED, JobState.FAILED)


@dataclass(frozen=True, slots=True)
class Limits:
    """Concurrency and rate limits; None means no limit."""

    concurrency: int | None = None
    rate: int | None = None
    per: float | None = None  # seconds of the rate window

    @property
    def any(self) -> bool:
        return self.concurrency is not None or self.rate is not None


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """One group of a queue: waiting and running jobs, paused, own limits."""

    name: str
    waiting: int
    running: int
    paused: bool
    limits: Limits


@dataclass(frozen=True, slots=True)
class QueueOverview:
    """A queue at a glance. `exists` is False for a name no client has used."""

    name: str
    exists: bool
    paused: bool
    counts: dict[JobState, int]
    limits: Limits
    group_limits: Limits
    groups: list[GroupInfo]
    groups_total: int
    # meta `version` (docs/protocol.md §10): None before any client used the queue
    protocol_version: int | None = None


def limits_from(fields: Mapping[str, str], prefix: str = "") -> Limits:
    """Limits stored as `<prefix>concurrency`, `<prefix>rate`, `<prefix>window` (ms)."""
    concurrency = fields.get(prefix + "concurrency")
    rate = fields.get(prefix + "rate")
    window = fields.get(prefix + "window")
    return Limits(
        concurrency=int(concurrency) if concurrency else None,
        rate=int(rate) if rate else None,
        per=(int(window) / 1000 if window else 1.0) if rate else None,
    )


def texts(raw: Mapping[Any, Any]) -> dict[str, str]:
    return {ops.text(k): ops.text(v) for k, v in raw.items()}


def group_names(groups: Sequence[Any], held: Sequence[Any]) -> list[str]:
    return sorted({ops.text(g) for g in (*groups, *held)})


def overview(
    name: str,
    meta: Mapping[Any, Any],
    index_counts: dict[JobState, int],
    names: Sequence[str],
    waiting: Sequence[Any],
    running: Mapping[Any, Any],
    confs: Sequence[Mapping[Any, Any]],
) -> QueueOverview:
    """Assemble an overview: `waiting` has every group's ready count, `confs`
    the settings of the first MAX_GROUPS_SHOWN groups."""
    fields = texts(meta)
    active = texts(running)
    counts = dict(index_counts)
    counts[JobState.WAITING] += sum(int(n) for n in waiting)
    groups = []
    for group, count, raw in zip(names, waiting, confs, strict=False):
        conf = texts(raw)
        groups.append(
            GroupInfo(
                name=group,
                waiting=int(count),
                running=int(active.get(group, 0)),
                paused=conf.get("paused") == "1",
                limits=limits_from(conf),
            )
        )
    return QueueOverview(
        name=name,
        exists="version" in fields,
        paused=fields.get("paused") == "1",
        counts=counts,
        limits=limits_from(fields),
        group_limits=limits_from(fields, "group_"),
        groups=groups,
        groups_total=len(names),
        protocol_version=int(fields["version"]) if fields.get("version", "").isdigit() else None,
    )


def job_events(job_id: str, newest_first: Any) -> list[Event]:
    """The events of one job among XREVRANGE output, oldest first."""
    return [e for e in reversed(decode_entries(newest_first)) if e.job_id == job_id]


def purge_state(state: JobState | str) -> JobState:
    try:
        found = JobState(state)
    except ValueError:
        found = None
    if found not in PURGEABLE:
        names = ", ".join(s.value for s in PURGEABLE)
        raise ValidationError(f"purge empties one of {names}; got {state!r}")
    assert found is not None
    return found


def check_batch(batch: int) -> int:
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 10_000:
        raise ValidationError(f"batch must be an integer in [1, 10000], got {batch!r}")
    return batch


def slices(
    sizes: Sequence[int], offset: int, limit: int, reverse: bool
) -> list[tuple[int, int, int]]:
    """Where the page `offset`, `limit` of lists laid end to end (from the end
    with `reverse`) lies: (list index, first, last) ranks within each list,
    counted from that list's end with `reverse`."""
    order = range(len(sizes) - 1, -1, -1) if reverse else range(len(sizes))
    found, skip, want = [], offset, limit
    for index in order:
        size = sizes[index]
        if want <= 0:
            break
        if skip >= size:
            skip -= size
            continue
        take = min(size - skip, want)
        found.append((index, skip, skip + take - 1))
        skip, want = 0, want - take
    return found


def group_waiting(seen: QueueOverview, group: str) -> int | None:
    """The waiting jobs of `group` in an overview; None for a group it does not
    name (no job waits or runs in it, or beyond the groups an overview describes)."""
    return next((g.waiting for g in seen.groups if g.name == group), None)

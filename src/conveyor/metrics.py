"""Metrics history: what the workers of a queue did minute by minute, and how
long each task's jobs ran and waited, hour by hour (docs/protocol.md §15).

    queue.metrics_history(minutes=60)   # [MinuteCounts], oldest first
    queue.task_timings(hours=1)         # [TaskTimings], by task name

Workers count in memory and add their counts to Redis on each heartbeat, so
the history costs no round trip per job; a minute's counts therefore lag by
up to one heartbeat interval, and land in the minute (Redis time) of the
heartbeat that wrote them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from conveyor.errors import ValidationError

MINUTE_MS = 60_000
HOUR_MS = 3_600_000
WEEK_MINUTES = 7 * 24 * 60
# Every hour's keys live a week and an hour after their last write.
RETENTION_MS = 7 * 24 * HOUR_MS + HOUR_MS

# Upper bounds of the timing buckets, seconds; one more bucket holds the rest.
BOUNDS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0,
)  # fmt: skip
RUN, WAIT = "r", "w"  # the two timing kinds, as written in field names
TOTALS = ("completed", "failed", "retried", "stalled")  # the fields of `totals`


@dataclass(frozen=True, slots=True)
class MinuteCounts:
    """What the workers of a queue finished in one minute (Redis time)."""

    minute: datetime  # aware, UTC, the start of the minute
    completed: int
    failed: int  # failed for good (final failures and final stalls)
    retried: int  # failed runs that will run again


@dataclass(frozen=True, slots=True)
class Histogram:
    """Durations in buckets: counts[i] counts those <= bounds[i] (and above
    the bound before); the last count holds those above every bound."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    sum: float  # seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count else None

    def quantile(self, q: float) -> float | None:
        """An estimate of the q-quantile (0 <= q <= 1), interpolated within
        its bucket; None when empty. Above the last bound it is that bound."""
        if not 0.0 <= q <= 1.0:
            raise ValidationError(f"quantile must be within [0, 1], got {q!r}")
        total = self.count
        if not total:
            return None
        rank = q * total
        seen = 0
        for i, n in enumerate(self.counts):
            if n and seen + n >= rank:
                if i == len(self.bounds):
                    return self.bounds[-1]
                low = self.bounds[i - 1] if i else 0.0
                return low + (self.bounds[i] - low) * max(0.0, rank - seen) / n
            seen += n
        return self.bounds[-1]


EMPTY = Histogram(BOUNDS, (0,) * (len(BOUNDS) + 1), 0.0)


@dataclass(frozen=True, slots=True)
class TaskTimings:
    """How long the jobs of one task ran (handler time, measured by the
    worker) and waited (from becoming due to their start, Redis time)."""

    task: str
    run: Histogram
    wait: Histogram


# --- reading the stored form (docs/protocol.md §15) ----------------------------------------


def check_window(value: int, what: str, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise ValidationError(f"{what} must be an integer in [1, {most}], got {value!r}")
    return value


def hours_covering(now_ms: int, minutes: int) -> list[int]:
    """The hour numbers (ms // HOUR_MS) of the last `minutes` minutes."""
    last = now_ms // HOUR_MS
    first = (now_ms // MINUTE_MS - minutes + 1) * MINUTE_MS // HOUR_MS
    return list(range(first, last + 1))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def minute_counts(
    now_ms: int, minutes: int, hours: Mapping[int, Mapping[Any, Any]]
) -> list[MinuteCounts]:
    """One entry per minute of the last `minutes`, oldest first, from the
    counts hashes of `hours` (hour number -> HGETALL reply); gaps are zero."""
    current = now_ms // MINUTE_MS
    found: dict[int, tuple[int, int, int]] = {}
    for hour, fields in hours.items():
        for name, value in fields.items():
            c, f, r = (int(x) for x in _text(value).split())
            found[hour * 60 + int(_text(name))] = (c, f, r)
    history = []
    for minute in range(current - minutes + 1, current + 1):
        c, f, r = found.get(minute, (0, 0, 0))
        history.append(
            MinuteCounts(datetime.fromtimestamp(minute * 60, UTC), completed=c, failed=f, retried=r)
        )
    return history


def task_timings(hashes: Iterable[Mapping[Any, Any]]) -> list[TaskTimings]:
    """The timings hashes of some hours added up, per task, by task name.
    Fields: `<kind><bucket>:<task>` counts, `<kind>s:<task>` sums in µs."""
    counts: dict[tuple[str, str], list[int]] = {}
    sums: dict[tuple[str, str], int] = {}
    for fields in hashes:
        for raw_name, raw_value in fields.items():
            head, _, task = _text(raw_name).partition(":")
            kind, slot = head[:1], head[1:]
            value = int(_text(raw_value))
            if slot == "s":
                sums[(task, kind)] = sums.get((task, kind), 0) + value
            else:
                buckets = counts.setdefault((task, kind), [0] * (len(BOUNDS) + 1))
                buckets[min(int(slot), len(BOUNDS))] += value
    tasks = sorted({task for task, _ in counts} | {task for task, _ in sums})
    return [TaskTimings(t, _histogram(counts, sums, t, RUN), _histogram(counts, sums, t, WAIT))
            for t in tasks]  # fmt: skip


def _histogram(
    counts: dict[tuple[str, str], list[int]], sums: dict[tuple[str, str], int], task: str, kind: str
) -> Histogram:
    buckets = counts.get((task, kind))
    if buckets is None:
        return EMPTY
    return Histogram(BOUNDS, tuple(buckets), sums.get((task, kind), 0) / 1e6)

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
# Seven a decade (1, 1.5, 2, 3, 4, 6, 8) up to an hour, then coarser up to a day:
# a quantile interpolated in a bucket is off by at most half its value.
BOUNDS: tuple[float, ...] = (
    0.001, 0.0015, 0.002, 0.003, 0.004, 0.006, 0.008,
    0.01, 0.015, 0.02, 0.03, 0.04, 0.06, 0.08,
    0.1, 0.15, 0.2, 0.3, 0.4, 0.6, 0.8,
    1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 40.0, 60.0, 80.0,
    100.0, 150.0, 200.0, 300.0, 400.0, 600.0, 800.0,
    1000.0, 1500.0, 2000.0, 3000.0, 3600.0,
    5400.0, 7200.0, 10800.0, 14400.0, 21600.0, 43200.0, 86400.0,
)  # fmt: skip
# The Prometheus histograms' buckets: few, as each is a time series per task.
PROMETHEUS_BOUNDS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0,
)  # fmt: skip
# The two timing kinds, as written in field names (`r` and `w` counted on an
# older, coarser grid: readers skip them, and their hours expire within a week).
RUN, WAIT = "R", "W"
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
    max: float | None = None  # the largest duration counted, seconds (None: not known)

    @property
    def count(self) -> int:
        return sum(self.counts)

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count else None

    def quantile(self, q: float) -> float | None:
        """An estimate of the q-quantile (0 <= q <= 1), interpolated within
        its bucket, never above the largest duration counted (when known);
        None when empty. Above the last bound it is the largest, else that bound."""
        if not 0.0 <= q <= 1.0:
            raise ValidationError(f"quantile must be within [0, 1], got {q!r}")
        total = self.count
        if not total:
            return None
        rank = q * total
        seen = 0
        estimate = self.bounds[-1] if self.max is None else self.max
        for i, n in enumerate(self.counts):
            if n and seen + n >= rank:
                if i < len(self.bounds):
                    low = self.bounds[i - 1] if i else 0.0
                    estimate = low + (self.bounds[i] - low) * max(0.0, rank - seen) / n
                break
            seen += n
        return estimate if self.max is None else min(estimate, self.max)


EMPTY = Histogram(BOUNDS, (0,) * (len(BOUNDS) + 1), 0.0)


@dataclass(frozen=True, slots=True)
class TaskTimings:
    """How long the jobs of one task ran (handler time, measured by the
    worker) and waited (from becoming due to their start, Redis time)."""

    task: str
    run: Histogram
    wait: Histogram


# The minutes, before the current one, that a throughput is averaged over.
THROUGHPUT_MINUTES = 5


def per_minute(history: list[MinuteCounts], minutes: int = THROUGHPUT_MINUTES) -> float:
    """Completions per minute over the `minutes` full minutes before the last
    (the current one, still filling) of a history, oldest first."""
    done = history[:-1][-minutes:]
    return sum(m.completed for m in done) / minutes if done else 0.0


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


def task_timings(
    hashes: Iterable[Mapping[Any, Any]], maxima: Iterable[Mapping[Any, Any]] = ()
) -> list[TaskTimings]:
    """The timings hashes of some hours added up, per task, by task name.
    Fields: `<kind><bucket>:<task>` counts, `<kind>s:<task>` sums in µs;
    `maxima`: the hours' `tmax` hashes, `<kind>:<task>` the largest in µs."""
    counts: dict[tuple[str, str], list[int]] = {}
    sums: dict[tuple[str, str], int] = {}
    largest: dict[tuple[str, str], int] = {}
    for fields in maxima:
        for raw_name, raw_value in fields.items():
            kind, _, task = _text(raw_name).partition(":")
            largest[(task, kind)] = max(largest.get((task, kind), 0), int(_text(raw_value)))
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
    tasks = sorted({task for task, kind in counts if kind in (RUN, WAIT)})
    found = (counts, sums, largest)
    return [TaskTimings(t, _histogram(*found, t, RUN), _histogram(*found, t, WAIT)) for t in tasks]


def _histogram(
    counts: dict[tuple[str, str], list[int]],
    sums: dict[tuple[str, str], int],
    largest: dict[tuple[str, str], int],
    task: str,
    kind: str,
) -> Histogram:
    buckets = counts.get((task, kind))
    if buckets is None:
        return EMPTY
    most = largest.get((task, kind))
    return Histogram(
        BOUNDS,
        tuple(buckets),
        sums.get((task, kind), 0) / 1e6,
        None if most is None else most / 1e6,
    )

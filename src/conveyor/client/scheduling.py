"""Schedules (repeatable jobs, docs/protocol.md §16.6) on the client's side,
I/O-free: checking a schedule's terms, and reading a schedule's hash back as
a ScheduleInfo. QueueCore (core.py) builds the schedule's call with these."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from conveyor import serializers
from conveyor.client.models import SCHEDULE_OPTIONS, ScheduleInfo
from conveyor.errors import UnknownOptionError, ValidationError
from conveyor.options import check_job_id
from conveyor.protocol import ops
from conveyor.timeutil import epoch_ms, from_ms, to_ms
from conveyor.timing import check_tz, upcoming


def check_schedule(
    schedule_id: str,
    cron: str | None,
    every: float | timedelta | None,
    options: Mapping[str, Any],
) -> int | None:
    """Check a schedule's id, its one of cron= or every=, and its options;
    the interval `every` in ms (None for a cron schedule)."""
    check_job_id(schedule_id + "@" + "0" * 13)  # its tick jobs' ids must be valid
    if (cron is None) == (every is None):
        raise ValidationError("give exactly one of cron= or every=")
    unknown = set(options) - SCHEDULE_OPTIONS
    if unknown:
        raise UnknownOptionError(f"options a schedule cannot take: {sorted(unknown)}")
    every_ms = None
    if every is not None:
        every_ms = to_ms(every) if isinstance(every, timedelta) else round(every * 1000)
        if isinstance(every, bool) or every_ms < 1:
            raise ValidationError(f"every must be a positive number of seconds: {every!r}")
    return every_ms


def schedule_window(
    tz: str | None,
    start: datetime | float | None,
    end: datetime | float | None,
    max_runs: int | None,
    cron: str | None,
) -> tuple[str | None, int | None, int | None]:
    """A schedule's time zone, start and end (ms), validated (§16.6)."""
    if tz is not None:
        check_tz(tz)
        if cron is None:
            raise ValidationError("tz applies to cron= only")
    if max_runs is not None and (
        isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1
    ):
        raise ValidationError(f"max_runs must be an integer >= 1, got {max_runs!r}")
    start_ms = None if start is None else _moment_ms(start, "start")
    end_ms = None if end is None else _moment_ms(end, "end")
    if start_ms is not None and end_ms is not None and end_ms < start_ms:
        raise ValidationError("end is before start")
    return tz, start_ms, end_ms


def _moment_ms(value: datetime | float, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, datetime | int | float):
        raise ValidationError(f"{what} must be an aware datetime or epoch seconds: {value!r}")
    return epoch_ms(value)


def schedule_info(schedule_id: str, raw: Mapping[Any, Any], *, count: int = 5) -> ScheduleInfo:
    """A schedule read from its hash, with its next `count` fire times."""
    f = {ops.text(k): ops.text(v) for k, v in raw.items()}
    every = f.get("every")

    def ms(name: str) -> int | None:
        value = f.get(name)
        return int(value) if value else None

    cron, tz, limit, runs = f.get("cron") or None, f.get("tz") or None, ms("limit"), ms("runs")
    pending = ms("next")
    ticks = []
    if pending is not None:
        ticks = upcoming(
            cron=cron,
            every_ms=ms("every"),
            tz=tz,
            next_ms=pending,
            end_ms=ms("end"),
            runs_left=None if limit is None else limit - (runs or 0) + 1,
            count=count,
        )
    return ScheduleInfo(
        id=schedule_id,
        task=f.get("task", ""),
        data=serializers.loads(f["data"]) if f.get("data") else None,
        cron=cron,
        every=int(every) / 1000 if every else None,
        next_run=from_ms(pending),
        job_id=f.get("job"),
        tz=tz,
        start=from_ms(ms("start")),
        end=from_ms(ms("end")),
        max_runs=limit,
        runs=runs or 0,
        ended=from_ms(ms("ended")),
        upcoming=tuple(t for t in (from_ms(x) for x in ticks) if t is not None),
    )

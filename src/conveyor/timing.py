"""When a repeatable job's next tick is: cron expressions (5 fields, or 6 with
seconds first) in a time zone (UTC by default) and fixed intervals."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from conveyor.errors import ValidationError


def _seconds_first(expression: str) -> bool:
    return len(expression.split()) == 6


def check_cron(expression: str) -> str:
    """5 fields (minute first), or 6 with seconds first (`*/10 * * * * *`:
    every 10 s), as BullMQ's cron expressions."""
    if (
        not isinstance(expression, str)
        or len(expression.split()) not in (5, 6)
        or not croniter.is_valid(expression, second_at_beginning=_seconds_first(expression))
    ):
        raise ValidationError(f"not a valid 5- or 6-field cron expression: {expression!r}")
    return expression


def check_tz(name: object) -> str:
    """An IANA time zone name (`Europe/Paris`)."""
    if not isinstance(name, str) or not name:
        raise ValidationError(f"tz must be an IANA time zone name, got {name!r}")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValidationError(f"unknown time zone {name!r}") from None
    return name


def next_tick(
    *,
    cron: str | None,
    every_ms: int | None,
    fired_ms: int,
    now_ms: int,
    tz: str | None = None,
    not_before_ms: int | None = None,
) -> int:
    """The first tick after both `fired_ms` and `now_ms`, and not before
    `not_before_ms` (a schedule's start). Missed ticks collapse into one: a
    schedule that was down for a while runs once, not once per tick. A cron
    expression is read in the time zone `tz` (UTC when None)."""
    after = max(fired_ms, now_ms)
    if cron:
        if not_before_ms is not None:
            after = max(after, not_before_ms - 1)
        start = datetime.fromtimestamp(after / 1000, ZoneInfo(tz) if tz else UTC)
        following: float = croniter(cron, start, second_at_beginning=_seconds_first(cron)).get_next(
            float
        )
        return round(following * 1000)
    if not every_ms or every_ms <= 0:
        raise ValidationError("a schedule needs cron or a positive interval")
    if not_before_ms is not None and not_before_ms > after:
        return not_before_ms
    missed = (after - fired_ms) // every_ms + 1
    return fired_ms + missed * every_ms


def upcoming(
    *,
    cron: str | None,
    every_ms: int | None,
    tz: str | None,
    next_ms: int,
    end_ms: int | None,
    runs_left: int | None,
    count: int,
) -> list[int]:
    """The next `count` ticks from the pending one (`next_ms`), within the
    schedule's end and its runs left (the pending tick counted)."""
    ticks: list[int] = []
    tick = next_ms
    limit = count if runs_left is None else min(count, runs_left)
    while len(ticks) < limit and (end_ms is None or tick <= end_ms):
        ticks.append(tick)
        tick = next_tick(cron=cron, every_ms=every_ms, fired_ms=tick, now_ms=tick, tz=tz)
    return ticks

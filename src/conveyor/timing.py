"""When a repeatable job's next tick is: cron expressions (UTC) and fixed intervals."""

from __future__ import annotations

from datetime import UTC, datetime

from croniter import croniter

from conveyor.errors import ValidationError


def check_cron(expression: str) -> str:
    if not isinstance(expression, str) or not croniter.is_valid(expression):
        raise ValidationError(f"not a valid cron expression: {expression!r}")
    return expression


def next_tick(*, cron: str | None, every_ms: int | None, fired_ms: int, now_ms: int) -> int:
    """The first tick after both `fired_ms` and `now_ms` (missed ticks collapse
    into one: a schedule that was down for a while runs once, not once per tick)."""
    after = max(fired_ms, now_ms)
    if cron:
        start = datetime.fromtimestamp(after / 1000, UTC)
        following: float = croniter(cron, start).get_next(float)
        return round(following * 1000)
    if not every_ms or every_ms <= 0:
        raise ValidationError("a schedule needs cron or a positive interval")
    missed = (after - fired_ms) // every_ms + 1
    return fired_ms + missed * every_ms

"""Seconds in the public API, integer milliseconds on the wire."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from conveyor.errors import ValidationError


def to_ms(seconds: float | timedelta) -> int:
    if isinstance(seconds, timedelta):
        seconds = seconds.total_seconds()
    return round(seconds * 1000)


def epoch_ms(moment: datetime | float) -> int:
    """A point in time (aware datetime, or seconds since the epoch) in ms."""
    if isinstance(moment, datetime):
        if moment.tzinfo is None:
            raise ValidationError("naive datetime: pass an aware datetime (e.g. tzinfo=UTC)")
        return round(moment.timestamp() * 1000)
    return round(moment * 1000)


def from_ms(ms: int | None) -> datetime | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC)


def delay_until_ms(moment: datetime | float) -> int:
    """Milliseconds from now (this machine's clock) until `moment`."""
    return epoch_ms(moment) - round(time.time() * 1000)

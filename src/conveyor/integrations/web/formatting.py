"""Jinja filters: dates, durations, limits and data as people read them."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from conveyor.client.inspect import Limits


def when(value: datetime | None) -> str:
    """An aware datetime as `2026-11-25 13:02:07 UTC` (never an epoch float)."""
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def epoch(value: Any) -> str:
    """Seconds since the epoch (a worker's self-description) as a date."""
    try:
        return when(datetime.fromtimestamp(float(value), UTC))
    except (TypeError, ValueError):
        return "—"


def seconds(value: float | None) -> str:
    if value is None:
        return "—"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.3g} s"
    if value < 7200:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"


def limits(value: Limits) -> str:
    parts = []
    if value.concurrency is not None:
        parts.append(f"{value.concurrency} at once")
    if value.rate is not None:
        parts.append(f"{value.rate} per {seconds(value.per)}")
    return ", ".join(parts) or "none"


def pretty(value: Any) -> str:
    """Data or a result as indented JSON (text stays text)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


FILTERS: dict[str, Callable[..., str]] = {
    "when": when,
    "epoch": epoch,
    "seconds": seconds,
    "limits": limits,
    "pretty": pretty,
}

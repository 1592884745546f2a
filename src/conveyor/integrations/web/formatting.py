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


def mib(value: Any) -> str:
    """Bytes (a worker's RSS) in MiB."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "—"
    return f"{value / 2**20:.0f} MiB"


def brief(value: Any, most: int = 80) -> str:
    """A job's data on one line, cut at `most` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= most else text[: most - 1] + "…"


def last_line(value: str | None) -> str:
    """The line of a traceback that says what failed: its last non-empty one."""
    lines = [line for line in (value or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


FILTERS: dict[str, Callable[..., str]] = {
    "mib": mib,
    "brief": brief,
    "last_line": last_line,
    "when": when,
    "epoch": epoch,
    "seconds": seconds,
    "limits": limits,
    "pretty": pretty,
}

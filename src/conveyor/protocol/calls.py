"""What every operation shares: the Call it builds and the helpers that read replies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Arg = str | int | float | bytes


@dataclass(frozen=True, slots=True)
class Call:
    """One script invocation: which script, its KEYS and its ARGV."""

    script: str
    keys: tuple[str, ...]
    args: tuple[Arg, ...]


def flag(value: bool) -> int:
    return 1 if value else 0


def text(value: Any) -> str:
    """A reply element as text (replies arrive as bytes)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def int_or_none(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def bytes_or_none(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return str(value).encode()


def optional_ms(value: Any) -> int | None:
    """A time in ms, where a negative one means none (-1: nothing due)."""
    ms = int(value)
    return None if ms < 0 else ms

"""The job record's layout shared by every reader (docs/protocol.md §4.1):
the defaults of the fields a record leaves out, and its data pieces."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# A job record leaves out fields that hold these values (docs/protocol.md
# §4.1; include/record.lua): every reader of a record applies them.
RECORD_DEFAULTS: dict[str, int] = {
    "priority": 1000, "attempts": 0, "failures": 0, "stalls": 0, "max_failures": 3,
    "max_stalls": 3, "min_backoff": 1000, "max_backoff": 300_000, "timeout": 300_000,
    "result_ttl": 86_400_000,
}  # fmt: skip

# A record's data longer than 64 bytes (up to 4096) is stored in pieces of at
# most 64 bytes, `data`, `data2`, `data3` ..., so that the record stays a
# listpack (docs/protocol.md §4.1; include/record.lua): at most this many.
DATA_PIECES = 64
DATA_PIECE_NAMES = ("data", *(f"data{k}" for k in range(2, DATA_PIECES + 1)))
# A piece ends at most 3 bytes short of 64 (never inside a UTF-8 character): a
# `data` shorter than this is the whole data, and a reader need not look for more.
FIRST_PIECE_MIN = 61


def record_data(record: Mapping[str, Any]) -> Any:
    """The whole data of a record read with HGETALL (text keys; str or bytes values):
    `data`, then `data2`, `data3` ... while present. None when it has no data."""
    data = record.get("data")
    if data is None or record.get("data2") is None:
        return data
    parts = [data]
    for name in DATA_PIECE_NAMES[1:]:
        piece = record.get(name)
        if piece is None:
            break
        parts.append(piece)
    return b"".join(parts) if isinstance(data, bytes) else "".join(parts)

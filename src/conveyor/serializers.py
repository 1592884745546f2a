"""JSON, the default and only built-in format: readable from any language.

Never pickle: a queue's contents must not be able to run code in a worker.
"""

from __future__ import annotations

import json
from typing import Any

from conveyor.errors import NotSerializableError

_encoder = json.JSONEncoder(allow_nan=False, separators=(",", ":"), ensure_ascii=False)
_decoder = json.JSONDecoder()


def dumps(value: Any, *, what: str = "data") -> str:
    """Strict JSON (no NaN or Infinity, no custom objects)."""
    try:
        return _encoder.encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise NotSerializableError(f"{what} is not JSON-serialisable: {exc}") from None


def loads(text: str | bytes) -> Any:
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    return _decoder.decode(text)

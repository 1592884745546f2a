"""JSON, the default and only built-in format: readable from any language.

Never pickle: a queue's contents must not be able to run code in a worker.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from conveyor.errors import NotSerializableError

_encoder = json.JSONEncoder(allow_nan=False, separators=(",", ":"), ensure_ascii=False)
_decoder = json.JSONDecoder()


def _not_serializable(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# JSONEncoder.encode builds a new C encoder on every call (about 1 µs of a
# 1.5 µs float). One built once, without circular-reference markers, is
# stateless and safe to share: a circular structure ends in RecursionError.
_c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
_encode_str = json.encoder.encode_basestring
_encode_any = (
    None
    if _c_make_encoder is None
    else _c_make_encoder(None, _not_serializable, _encode_str, None, ":", ",", False, False, False)
)


def _encode(value: Any) -> str:
    if type(value) is str:
        return _encode_str(value)
    if _encode_any is None:  # no C accelerator (another Python implementation)
        return _encoder.encode(value)
    return "".join(_encode_any(value, 0))


# Deeper documents could be encoded here yet not decoded by a worker whose
# stack is already deeper: refuse them at the producer.
MAX_DEPTH = 200


def dumps(value: Any, *, what: str = "data") -> str:
    """Strict JSON: no NaN or Infinity, no custom objects, valid UTF-8 text,
    nesting at most MAX_DEPTH."""
    try:
        text = _encode(value)
    except (TypeError, ValueError) as exc:
        found = _first_bad(value)
        if found is not None:
            path, problem = found
            where = what.removeprefix("the ") + path
            raise NotSerializableError(
                f"{what} is not JSON-serialisable: {where} {problem}"
            ) from None
        raise NotSerializableError(f"{what} is not JSON-serialisable: {exc}") from None
    except RecursionError as exc:
        raise NotSerializableError(f"{what} is not JSON-serialisable: {exc}") from None
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise NotSerializableError(f"{what} is not valid Unicode text: {exc}") from None
    if text.count("[") + text.count("{") > MAX_DEPTH and _depth(text) > MAX_DEPTH:
        raise NotSerializableError(f"{what} is nested deeper than {MAX_DEPTH} levels")
    return text


_SCALARS = (str, int, float, bool, type(None))


def _first_bad(value: Any) -> tuple[str, str] | None:
    """The path (`["when"]`, `[2]`) of the first value JSON refuses, and what it is; found
    only once encoding failed, so the fast path never walks the data."""
    stack: list[tuple[str, Any]] = [("", value)]
    seen: set[int] = set()
    while stack:
        path, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return path, f"is {item!r} (JSON has no NaN or Infinity)"
        if isinstance(item, _SCALARS):
            continue
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, dict):
            children = []
            for key, child in item.items():
                if not isinstance(key, _SCALARS):
                    return path, f"has a key of type {type(key).__name__}: {key!r}"
                shown = _encode_str(key) if isinstance(key, str) else repr(key)
                children.append((f"{path}[{shown}]", child))
            stack.extend(reversed(children))
        elif isinstance(item, list | tuple):
            stack.extend(reversed([(f"{path}[{i}]", c) for i, c in enumerate(item)]))
        else:
            return path, (
                f"is of type {type(item).__name__}: JSON holds str, int, float, bool, None, "
                "lists and dicts only, so convert it first"
            )
    return None


def _depth(text: str) -> int:
    """Deepest nesting of arrays and objects in JSON text (outside strings)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


# The C scanner behind the decoder: about 3x faster than `decode` for the small
# documents a worker reads per job, which is most of a no-op job's decoding.
_scan: Callable[[str, int], tuple[Any, int]] = _decoder.scan_once  # type: ignore[attr-defined]


def loads(text: str | bytes) -> Any:
    """Decode JSON; any undecodable input raises ValueError."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        try:
            value, end = _scan(text, 0)
        except StopIteration:
            end = -1
        if end == len(text):
            return value
        # surrounding whitespace, trailing data or invalid JSON: the full decoder
        # accepts the first and raises a precise error for the others
        return _decoder.decode(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to decode") from None

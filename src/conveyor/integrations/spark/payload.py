"""Payload columns to one JSON object per row, column-wise in Arrow.

`{"customer":7,"amount":10.5,"region":"eu"}`: the same text `serializers.dumps` makes of the
row's dict for the usual column types (integers, floats, booleans, strings, and what
`_jsonable` turns into those: times as ISO-8601 text, decimals as floats), built with Arrow
compute functions instead of a dict and a `json` call per row. Anything else — nested types,
strings with control characters, NaN or infinity — takes the per-row path through
`serializers.dumps`, which also gives the error for what JSON cannot carry.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from conveyor import serializers
from conveyor.errors import ValidationError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["json_objects"]

# Characters a JSON string must escape as \uXXXX (RE2 syntax).
_CONTROL = r"[\x{00}-\x{1f}]"


def json_objects(batch: pa.RecordBatch) -> pa.Array:
    """One JSON object per row (string array, no nulls), keys in column order."""
    import pyarrow as pa
    import pyarrow.compute as pc

    batch = _jsonable(batch)
    parts: list[pa.Array | str] = []
    for i, (name, column) in enumerate(zip(batch.schema.names, batch.columns, strict=True)):
        key = json.dumps(name, ensure_ascii=False)
        parts.append(("{" if i == 0 else ",") + key + ":")
        values = _values(column)
        if values is None:
            return _per_row(batch)
        parts.append(values)
    parts.append("}")
    if batch.num_rows == 0:
        return pa.array([], pa.string())
    return pc.binary_join_element_wise(*parts, "")


def _values(column: pa.Array) -> pa.Array | None:
    """Each value as JSON text, or None when this column needs the per-row path."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    if pa.types.is_null(kind):
        return pa.array(["null"] * len(column), pa.string())
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        text = column.cast(pa.string())
    elif pa.types.is_floating(kind):
        doubles = column.cast(pa.float64())  # a float32 is written as the double it is
        if pc.any(pc.invert(pc.is_finite(doubles))).as_py():
            return None  # NaN / infinity: serializers.dumps refuses them, with the message
        text = doubles.cast(pa.string())
        # Arrow writes 500.0 as "500": keep it a float for the worker's json.loads
        floats = pc.binary_join_element_wise(text, ".0", "")
        text = pc.if_else(pc.match_substring_regex(text, "[.eE]"), text, floats)
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        text = column.cast(pa.string())
        if pc.any(pc.match_substring_regex(text, _CONTROL)).as_py():
            return None
        text = pc.replace_substring(text, "\\", "\\\\")
        text = pc.replace_substring(text, '"', '\\"')
        text = pc.binary_join_element_wise('"', text, '"', "")
    else:
        return None
    return text.fill_null("null")


def _per_row(batch: pa.RecordBatch) -> pa.Array:
    import pyarrow as pa

    return pa.array([serializers.dumps(row) for row in batch.to_pylist()], pa.string())


def _jsonable(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Payload columns whose Python values JSON cannot take, made into ones it can:
    times as ISO-8601 text, decimals as floats. Binary is refused (encode it yourself)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arrays, names = [], batch.schema.names
    for name, array in zip(names, batch.columns, strict=True):
        kind = array.type
        if pa.types.is_timestamp(kind):
            if kind.tz is None:
                array = array.cast(pa.timestamp(kind.unit, tz="UTC"))
            array = pc.strftime(array, format="%Y-%m-%dT%H:%M:%SZ")
        elif pa.types.is_date(kind) or pa.types.is_time(kind):
            array = array.cast(pa.string())
        elif pa.types.is_decimal(kind):
            array = array.cast(pa.float64())
        elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            raise ValidationError(f"payload column {name!r} is binary: JSON cannot carry it")
        arrays.append(array)
    return pa.RecordBatch.from_arrays(arrays, names=names)

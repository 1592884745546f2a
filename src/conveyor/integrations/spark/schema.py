"""The versioned, public schemas of the Spark formats, and Arrow column builders.

A schema version changes only by adding nullable columns at the end (readers of an older
version keep working with ``.schema(old_ddl)``); a rename, a removal or a type change is a
new major version, listed in docs/spark.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = [
    "EVENTS_COLUMNS",
    "EVENTS_DDL",
    "EVENTS_SCHEMA_VERSION",
    "JOBS_COLUMNS",
    "JOBS_DDL",
    "JOBS_SCHEMA_VERSION",
    "WRITE_COLUMNS",
    "arrow_schema",
    "column",
    "struct",
]

JOBS_SCHEMA_VERSION = 1
EVENTS_SCHEMA_VERSION = 2  # 2: `jobs`

# (name, Spark SQL type, nullable). Kinds for Arrow: see `column`.
JOBS_COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("id", "string", False),
    ("queue", "string", False),
    ("task", "string", True),
    ("state", "string", False),
    ("data", "string", True),  # the job's data as JSON text
    ("priority", "int", True),  # 0 is the highest
    ("group", "string", True),
    ("attempts", "int", True),  # runs started
    ("failures", "int", True),
    ("stalls", "int", True),
    ("max_failures", "int", True),
    ("progress", "double", True),
    ("created_at", "timestamp", True),  # UTC instants
    ("run_at", "timestamp", True),  # when the current attempt was due
    ("started_at", "timestamp", True),  # start of the latest attempt
    ("finished_at", "timestamp", True),
    ("result", "string", True),  # JSON text
    ("error", "string", True),
    ("worker", "string", True),
)

EVENTS_COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("stream_id", "string", False),  # the Redis stream entry id, "<ms>-<seq>"
    ("queue", "string", False),
    ("event", "string", False),  # created, updated, active, completed, retried, failed, ...
    ("job_id", "string", True),
    ("at", "timestamp", False),  # when Redis added the event (from the stream id)
    ("state", "string", True),
    ("attempt", "int", True),
    ("worker", "string", True),
    ("error", "string", True),
    ("progress", "double", True),
    ("delay_ms", "bigint", True),
    ("stalls", "int", True),
    # how many job events the row stands for: 1, or with rows=entries the jobs its entry names
    ("jobs", "int", False),
)

# Columns a batch or streaming write understands; every other column is payload.
WRITE_COLUMNS: dict[str, str] = {
    "id": "the job id (idempotency key); generated deterministically when absent",
    "task": "task name; else the `task` option",
    "data": "JSON text; when absent, the payload columns become a JSON object",
    "priority": "integer, 0 is the highest",
    "delay": "seconds (number) before the job is due",
    "run_at": "timestamp or epoch seconds when the job is due",
    "group": "group key",
    "max_failures": "integer >= 1",
    "max_stalls": "integer >= 1",
    "timeout": "seconds",
    "result_ttl": "seconds",
    "min_backoff": "seconds",
    "max_backoff": "seconds",
}


def _quote(name: str) -> str:
    return f"`{name}`"


def ddl(columns: Sequence[tuple[str, str, bool]]) -> str:
    return ", ".join(
        f"{_quote(name)} {kind}{'' if nullable else ' NOT NULL'}"
        for name, kind, nullable in columns
    )


JOBS_DDL = ddl(JOBS_COLUMNS)
EVENTS_DDL = ddl(EVENTS_COLUMNS)


def struct(columns: Sequence[tuple[str, str, bool]]) -> StructType:
    """The Spark schema, built without a JVM (so tasks and tests can use it)."""
    from pyspark.sql import types as t

    kinds = {
        "string": t.StringType(),
        "int": t.IntegerType(),
        "bigint": t.LongType(),
        "double": t.DoubleType(),
        "timestamp": t.TimestampType(),
    }
    return t.StructType(
        [t.StructField(name, kinds[kind], nullable) for name, kind, nullable in columns]
    )


def arrow_schema(schema: StructType) -> pa.Schema:
    """The exact Arrow schema Spark checks a reader's batches against."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def column(values: Sequence[Any] | pa.Array, field: pa.Field) -> pa.Array:
    """An Arrow array of `field`'s type from Redis replies (bytes, str or None), or from
    a binary array of them.

    Conversions run vectorised in Arrow: text is validated as UTF-8 once, numbers are parsed
    by Arrow's casts, and timestamps are epoch milliseconds scaled to microseconds.
    Unparseable numbers become nulls instead of failing the whole read.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    raw = values if isinstance(values, pa.Array) else pa.array(values, type=pa.binary())
    text = raw.cast(pa.string())
    kind = field.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return text.cast(kind)
    if pa.types.is_timestamp(kind):
        ms = _numbers(text, pa.int64())
        return pc.multiply(ms, 1000).cast(kind)
    return _numbers(text, kind)


def _numbers(text: pa.Array, kind: pa.DataType) -> pa.Array:
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        return text.cast(kind)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        # Slow path, only for corrupt records: parse one by one, nulls for garbage.
        parsed: list[Any] = []
        py = float if pa.types.is_floating(kind) else int
        for item in text.to_pylist():
            try:
                parsed.append(None if item is None else py(item))
            except ValueError:
                parsed.append(None)
        return pc.cast(pa.array(parsed), kind)

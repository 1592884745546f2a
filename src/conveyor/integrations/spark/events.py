"""`format("conveyor_events")`: the queue's lifecycle events stream, batch and streaming.

Rows follow `EVENTS_DDL` (version 1); offsets are stream entry ids (`{"id": "<ms>-<seq>"}`).
A range (lo, hi] is split into slices by time (`numPartitions`; a batch read's default is one
per `rowsPerPartition` entries of the stream) and each task reads its slice with
`XRANGE (lo hi COUNT pageSize`: deterministic, so a micro-batch Spark replays after a
restart reads exactly the same events (while the stream still holds them).

Streaming: `startingOffsets` = earliest | latest | an entry id; `maxEventsPerTrigger` limits
each micro-batch (admission control, Spark 4.2+), `Trigger.AvailableNow` pins the end at the
start of the query, and with `consumerName` every committed offset is recorded in Redis so
that `trim_events` never removes events this consumer has not processed.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from conveyor.errors import ConfigurationError
from conveyor.protocol.events import job_attempts

from . import store
from .options import Options, Target
from .schema import EVENTS_COLUMNS, arrow_schema, column

if TYPE_CHECKING:
    import pyarrow as pa
    import redis
    from pyspark.sql.types import StructType

__all__ = ["EventsReader", "EventsStreamReader", "make_events_reader", "make_events_stream"]

try:  # Spark 4.2+: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    _AVAILABLE_NOW: tuple[type, ...] = (SupportsTriggerAvailableNow,)
except ImportError:  # pragma: no cover - Spark 4.0/4.1: batches are not limited
    _AVAILABLE_NOW = ()

_MAX_SEQ = 18446744073709551615
_FIELDS = {name for name, _, _ in EVENTS_COLUMNS}
_ZERO = "0-0"


@dataclass(frozen=True, slots=True)
class EventsConfig:
    target: Target
    page_size: int
    num_partitions: int | None  # None: batch reads size it from the stream, streams use 2
    rows_per_partition: int
    start_id: str
    end_id: str | None
    starting: str
    max_per_trigger: int | None
    consumer: str | None
    per_entry: bool  # rows=entries: a row per stream entry, `jobs` counting what it names

    @classmethod
    def parse(cls, options: Options) -> EventsConfig:
        target = Target.from_options(options)
        limit = options.integer("maxEventsPerTrigger", 0, minimum=0)
        config = cls(
            target=target,
            page_size=options.integer("pageSize", 5000, minimum=1),
            num_partitions=options.integer("numPartitions", 0, minimum=0) or None,
            rows_per_partition=options.integer("rowsPerPartition", 250_000, minimum=1),
            start_id=_check_id(options.text("startId", _ZERO) or _ZERO, "startId"),
            end_id=_check_id(options.text("endId"), "endId"),
            starting=options.text("startingOffsets", "earliest") or "earliest",
            max_per_trigger=limit or None,
            consumer=options.text("consumerName"),
            per_entry=_per_entry(options.text("rows", "jobs")),
        )
        options.finish()
        return config


def _per_entry(rows: str | None) -> bool:
    if rows not in ("jobs", "entries"):
        raise ConfigurationError(f"option rows={rows!r}: expected 'jobs' or 'entries'")
    return rows == "entries"


def _check_id(value: str | None, name: str) -> Any:
    if value is None:
        return None
    try:
        store.stream_id_key(value)
    except ValueError:
        raise ConfigurationError(
            f"option {name}={value!r}: expected a stream id <ms>-<seq>"
        ) from None
    return value


class EventsPartition(InputPartition):
    """Stream entries with low < id <= high."""

    def __init__(self, low: str, high: str) -> None:
        super().__init__((low, high))
        self.low = low
        self.high = high


def _slices(low: str, high: str, count: int) -> list[InputPartition]:
    """(low, high] cut into up to `count` slices at millisecond boundaries."""
    lo_ms, _ = store.stream_id_key(low)
    hi_ms, _ = store.stream_id_key(high)
    if store.stream_id_key(high) <= store.stream_id_key(low):
        return []
    cuts = sorted({lo_ms + (hi_ms - lo_ms) * i // count for i in range(1, count)})
    bounds = [low] + [f"{ms}-{_MAX_SEQ}" for ms in cuts if lo_ms <= ms < hi_ms] + [high]
    parts: list[InputPartition] = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        if store.stream_id_key(b) > store.stream_id_key(a):
            parts.append(EventsPartition(a, b))
    return parts


def read_slice(
    config: EventsConfig, schema: StructType, partition: EventsPartition
) -> Iterator[pa.RecordBatch]:
    target = config.target
    key = target.keys().events
    arrow = arrow_schema(schema)
    client = store.raw_streams(target.client())
    low = partition.low
    try:
        while True:
            entries = client.xrange(key, f"({low}", partition.high, count=config.page_size)
            if not entries:
                return
            if config.per_entry:
                yield _entry_batch(entries, arrow, target.queue)
            else:
                yield _batch(entries, arrow, target.queue)
            low = store.stream_id_text(entries[-1][0])
            if len(entries) < config.page_size:
                return
    finally:
        client.close()


def _batch(entries: list[Any], schema: pa.Schema, queue: str) -> pa.RecordBatch:
    """One row per job event: an entry naming several jobs (`ids`, protocol §11) gives a
    row for each, all with the entry's stream id and time and its other fields.

    The rows `conveyor.client.events.decode_entries` gives (a test holds the two to the
    same rows), built column by column: through that decoder's Event per job, a page of
    1,000 entries of 50 jobs took 5.4x as long (176 against 33 ms, 2026-11-29)."""
    values, wanted = _columns(schema)
    stream_ids: list[Any] = []
    for stream_id, flat in entries:
        fields = dict(zip(flat[0::2], flat[1::2], strict=False))
        ids = fields.get(b"ids")
        if ids is None:
            stream_ids.append(stream_id)
            for key, out in wanted:
                out.append(fields.get(key))
            continue
        jobs = job_attempts(ids, fields.get(b"attempts"))
        stream_ids.extend([stream_id] * len(jobs))
        for key, out in wanted:  # column by column: a dict per job would cost more
            if key == b"id":
                out.extend(job_id for job_id, _ in jobs)
            elif key == b"attempt" and b"attempts" in fields:
                out.extend(attempt for _, attempt in jobs)
            else:
                out.extend([fields.get(key)] * len(jobs))
    return _arrays(schema, values, stream_ids, [1] * len(stream_ids), queue)


def _entry_batch(entries: list[Any], schema: pa.Schema, queue: str) -> pa.RecordBatch:
    """rows=entries: one row per stream entry, `jobs` the number of jobs it names. Every
    field but a job's id and attempt is the entry's own, shared by its jobs (protocol §11),
    so grouping these rows and summing `jobs` counts what the per-job rows count: the
    pipeline's 3 million job events are about 37,000 entries. `job_id` and `attempt` are
    those of the entry's job when it names one, null when it names several."""
    values, wanted = _columns(schema)
    stream_ids: list[Any] = []
    counts: list[int] = []
    for stream_id, flat in entries:
        fields = dict(zip(flat[0::2], flat[1::2], strict=False))
        ids = fields.get(b"ids")
        jobs = None if ids is None else job_attempts(ids, fields.get(b"attempts"))
        if jobs is not None and len(jobs) == 1:  # the row _batch gives for it
            fields[b"id"], attempt = jobs[0]
            if b"attempts" in fields:
                fields[b"attempt"] = attempt
        stream_ids.append(stream_id)
        counts.append(1 if jobs is None else len(jobs))
        several = jobs is not None and len(jobs) > 1
        for key, out in wanted:
            out.append(None if several and key in _PER_JOB else fields.get(key))
    return _arrays(schema, values, stream_ids, counts, queue)


# Stream field of each column (the job id is the entry's `id` field); the fields that
# differ between the jobs an entry names; the columns not read from the entry's fields.
_STREAM_FIELD = {"job_id": b"id"}
_PER_JOB = (b"id", b"attempt")
_DERIVED = ("queue", "at", "stream_id", "jobs")


def _columns(schema: pa.Schema) -> tuple[dict[str, list[Any]], list[tuple[bytes, list[Any]]]]:
    """A list per column, and (stream field, list) for the columns read from the fields."""
    values: dict[str, list[Any]] = {f.name: [] for f in schema}
    wanted = [
        (_STREAM_FIELD.get(name, name.encode()), out)
        for name, out in values.items()
        if name not in _DERIVED
    ]
    return values, wanted


def _arrays(
    schema: pa.Schema, values: dict[str, list[Any]], stream_ids: list[Any], counts: list[int],
    queue: str,
) -> pa.RecordBatch:  # fmt: skip
    import pyarrow as pa

    if "stream_id" in values:
        values["stream_id"] = stream_ids
    arrays = []
    for f in schema:
        if f.name == "queue":
            arrays.append(pa.array([queue] * len(stream_ids), f.type))
        elif f.name == "at":
            arrays.append(_times(stream_ids, f.type))
        elif f.name == "jobs":
            arrays.append(pa.array(counts, f.type))
        else:
            arrays.append(column(values[f.name], f))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _times(stream_ids: list[Any], kind: pa.DataType) -> pa.Array:
    import pyarrow as pa
    import pyarrow.compute as pc

    # "<ms>-<seq>": the ms part of every id at once (a split per id in Python cost as much)
    text = pa.array(stream_ids, pa.binary()).cast(pa.string())
    ms = pc.list_element(pc.split_pattern(text, "-", max_splits=1), 0).cast(pa.int64())
    return pc.multiply(ms, 1000).cast(kind)


def _check_schema(schema: StructType) -> None:
    for f in schema.fields:
        if f.name not in _FIELDS:
            raise ConfigurationError(f"format conveyor_events has no column {f.name!r}")


class EventsReader(DataSourceReader):
    """Batch read of (startId, endId]; endId defaults to the last entry at planning."""

    def __init__(self, config: EventsConfig, schema: StructType) -> None:
        self.config = config
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        """Time slices of (startId, endId]: `numPartitions`, else one per `rowsPerPartition`
        entries of the stream (at least 2). Events are not spread evenly in time (a bulk
        enqueue writes a million `created` in seconds), so two slices by time can hold one
        third and two thirds of the events and leave a core idle half the read; many slices
        even that out as the tasks take them in turn."""
        key = self.config.target.keys().events
        high, count = self.config.end_id, self.config.num_partitions
        if high is None or count is None:
            client = store.raw_streams(self.config.target.client())
            try:
                high = high or last_id(client, key)
                if count is None:
                    per = self.config.rows_per_partition
                    count = max(2, math.ceil(int(client.xlen(key)) / per))
            finally:
                client.close()
        parts = _slices(self.config.start_id, high, count)
        return parts or [EventsPartition(_ZERO, _ZERO)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, EventsPartition)
        if partition.high == _ZERO:
            return iter(())
        return read_slice(self.config, self.schema, partition)


def last_id(client: redis.Redis, key: str) -> str:
    newest = client.xrevrange(key, "+", "-", count=1)
    return store.stream_id_text(newest[0][0]) if newest else _ZERO


class EventsStreamReader(DataSourceStreamReader, *_AVAILABLE_NOW):  # type: ignore[misc]
    """Micro-batches of events. The driver-side methods keep one lazy connection, which is
    never pickled (`__getstate__`): the tasks open their own in `read`."""

    def __init__(self, config: EventsConfig, schema: StructType) -> None:
        self.config = config
        self.schema = schema
        self.key = config.target.keys().events
        self.pinned: str | None = None
        self._client: redis.Redis | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = store.raw_streams(self.config.target.client())
        return self._client

    def initialOffset(self) -> dict[str, str]:
        starting = self.config.starting
        if starting == "earliest":
            return {"id": _ZERO}
        if starting == "latest":
            return {"id": last_id(self.client, self.key)}
        return {"id": _check_id(starting, "startingOffsets")}

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        limit = self.config.max_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        self.pinned = last_id(self.client, self.key)

    def latestOffset(self, start: dict[str, str], limit: Any) -> dict[str, str]:
        from pyspark.sql.streaming.datasource import ReadMaxRows

        end = self.pinned or last_id(self.client, self.key)
        low = start["id"]
        if isinstance(limit, ReadMaxRows) and store.stream_id_key(end) > store.stream_id_key(low):
            end = self._after(low, end, limit.max_rows)
        return {"id": end if store.stream_id_key(end) > store.stream_id_key(low) else low}

    def _after(self, low: str, high: str, rows: int) -> str:
        """The id of the `rows`-th entry after `low` (at most `high`), read in pages that
        keep only ids in memory."""
        last, left = low, rows
        while left > 0:
            entries = self.client.xrange(self.key, f"({last}", high, count=min(left, 20_000))
            if not entries:
                break
            last = store.stream_id_text(entries[-1][0])
            left -= len(entries)
        return last

    def reportLatestOffset(self) -> dict[str, str] | None:
        return {"id": last_id(self.client, self.key)}

    def partitions(self, start: dict[str, str], end: dict[str, str]) -> Sequence[InputPartition]:
        return _slices(start["id"], end["id"], self.config.num_partitions or 2)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, EventsPartition)
        return read_slice(self.config, self.schema, partition)

    def commit(self, end: dict[str, str]) -> None:
        if self.config.consumer:
            keys = self.config.target.keys()
            store.register_consumer(self.client, keys, self.config.consumer, end["id"])

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def make_events_reader(options: Options, schema: StructType) -> EventsReader:
    config = EventsConfig.parse(options)
    _check_schema(schema)
    return EventsReader(config, schema)


def make_events_stream(options: Options, schema: StructType) -> EventsStreamReader:
    config = EventsConfig.parse(options)
    _check_schema(schema)
    if config.starting not in ("earliest", "latest"):
        _check_id(config.starting, "startingOffsets")
    return EventsStreamReader(config, schema)

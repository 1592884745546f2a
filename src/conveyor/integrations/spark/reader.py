"""`spark.read.format("conveyor")`: one row per job (schema `JOBS_DDL`, version 1).

Planning (on the driver) never lists keys: it takes `ZCARD` of each requested state's index
and splits the rank range [0, n) into partitions; the upper bound is frozen at planning, so
jobs that arrive later are not read. Each task pages its ranks with one
`SORT index BY nosort LIMIT .. GET ..` per page, the next page asked for while it builds the
Arrow batch of the last one (in Spark's exact schema, column by column). A row is kept
only if the record's state still matches the index it was found in, so a job is never read
as two states; but the read is a per-page snapshot, not a point-in-time
one: a job that changes state during the read may be missed.

Filter pushdown (on by default; needs `spark.sql.python.filterPushdown.enabled`, which
`register()` sets): `state = x` / `state IN (...)` choose the indexes to read; bounds on
`finished_at` skip the older part of the completed/failed indexes (scored by expiry, which
is never before the finish) and bounds on `run_at` window the delayed index. Time filters
are also applied to rows in the task and handed back to Spark, which re-checks them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from conveyor.errors import ConfigurationError
from conveyor.protocol.record import RECORD_DEFAULTS

from . import store
from .options import Options, Target
from .schema import JOBS_COLUMNS, arrow_schema, column

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.datasource import Filter
    from pyspark.sql.types import StructType

__all__ = ["JobsPartition", "JobsReader", "ReadConfig", "make_reader"]

_KNOWN = {name: kind for name, kind, _ in JOBS_COLUMNS}
_TIME_COLUMNS = ("created_at", "run_at", "started_at", "finished_at")


@dataclass(frozen=True, slots=True)
class Bound:
    """A range of a time column, in microseconds; None is open."""

    low: int | None = None
    low_inclusive: bool = True
    high: int | None = None
    high_inclusive: bool = True

    def narrowed(self, op: str, micros: int) -> Bound:
        if op in (">", ">="):
            if self.low is None or micros >= self.low:
                return Bound(micros, op == ">=", self.high, self.high_inclusive)
        elif op in ("<", "<=") and (self.high is None or micros <= self.high):
            return Bound(self.low, self.low_inclusive, micros, op == "<=")
        return self


@dataclass(frozen=True, slots=True)
class ReadConfig:
    target: Target
    states: tuple[str, ...]
    page_size: int
    rows_per_partition: int
    num_partitions: int | None
    pushdown: bool
    bounds: dict[str, Bound] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: Options) -> ReadConfig:
        target = Target.from_options(options)
        states = options.names("states") or store.STATES
        unknown = sorted(set(states) - set(store.STATES))
        if unknown:
            raise ConfigurationError(f"option states: unknown {unknown}; use {store.STATES}")
        bounds: dict[str, Bound] = {}
        after, before = options.instant_ms("finishedAfter"), options.instant_ms("finishedBefore")
        if after is not None or before is not None:
            bounds["finished_at"] = Bound(
                None if after is None else after * 1000, True,
                None if before is None else before * 1000, False,
            )  # fmt: skip
        parts = options.integer("numPartitions", 0, minimum=0)
        config = cls(
            target=target,
            states=tuple(states),
            page_size=options.integer("pageSize", 5000, minimum=1),
            rows_per_partition=options.integer("rowsPerPartition", 100_000, minimum=1),
            num_partitions=parts or None,
            pushdown=options.flag("filterPushdown", True),
            bounds=bounds,
        )
        options.finish()
        return config


class JobsPartition(InputPartition):
    """Ranks [start, stop) of index `key`, which lists jobs in `state`."""

    def __init__(self, state: str, key: str, start: int, stop: int) -> None:
        super().__init__((state, key, start, stop))
        self.state = state
        self.key = key
        self.start = start
        self.stop = stop


def _check_schema(schema: StructType) -> None:
    for f in schema.fields:
        kind = _KNOWN.get(f.name)
        if kind is None:
            raise ConfigurationError(f"format conveyor has no column {f.name!r}; see JOBS_DDL")
        if f.dataType.simpleString() != kind:
            raise ConfigurationError(
                f"column {f.name!r} is {kind}, not {f.dataType.simpleString()}"
            )


def _micros(value: Any) -> int | None:
    """A pushed-down timestamp literal in epoch microseconds (naive means UTC)."""
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


class JobsReader(DataSourceReader):
    """Pickled to the tasks with its config (strings and numbers only)."""

    def __init__(self, config: ReadConfig, schema: StructType) -> None:
        self.config = config
        self.schema = schema
        self.states = config.states
        self.bounds = dict(config.bounds)

    def partitions(self) -> Sequence[InputPartition]:
        target = self.config.target
        keys = target.keys()
        client = target.client()
        try:
            windows = [
                (state, key, *self._window(client, key, state))
                for state in self.states
                for key in store.state_indexes(client, keys, state)
            ]
        finally:
            client.close()
        windows = [w for w in windows if w[3] > w[2]]
        total = sum(hi - lo for _, _, lo, hi in windows)
        if total == 0:
            return [JobsPartition("waiting", keys.ready, 0, 0)]
        wanted = self.config.num_partitions or max(
            2 if total > 10_000 else 1, math.ceil(total / self.config.rows_per_partition)
        )
        parts: list[InputPartition] = []
        for state, key, lo, hi in windows:
            count = max(1, round(wanted * (hi - lo) / total))
            step = math.ceil((hi - lo) / count)
            parts.extend(
                JobsPartition(state, key, a, min(a + step, hi)) for a in range(lo, hi, step)
            )
        return parts

    def _window(self, client: Any, key: str, state: str) -> tuple[int, int]:
        """The rank range to read: everything, or what the time bounds leave."""
        size = int(client.zcard(key))
        low, high = 0, size
        finished = self.bounds.get("finished_at")
        if state in ("completed", "failed") and finished and finished.low is not None:
            low = store.rank_of_score(client, key, finished.low // 1000)
        run_at = self.bounds.get("run_at")
        if state == "delayed" and run_at:
            if run_at.low is not None:
                low = store.rank_of_score(client, key, run_at.low // 1000)
            if run_at.high is not None:
                high = min(size, store.rank_of_score(client, key, run_at.high // 1000 + 1))
        return low, high

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, JobsPartition)
        target = self.config.target
        keys = target.keys()
        wanted = self.schema.fields
        fetch = ["state"] + [
            f.name for f in wanted if f.name not in ("id", "queue", "state")
        ] + [b for b in self.bounds if b not in {f.name for f in wanted}]  # fmt: skip
        if "run_at" in fetch and "created_at" not in fetch:
            fetch.append("created_at")  # a missing run_at is created_at (protocol §4.1)
        schema = arrow_schema(self.schema)
        client = target.client()
        try:
            ranks = (partition.start, partition.stop)
            for flat in store.fetch_pages(
                client, keys, partition.key, partition.state, fetch, ranks, self.config.page_size
            ):
                if not flat:
                    return
                batch = self._batch(flat, fetch, schema, partition.state)
                if batch.num_rows:
                    yield batch
        finally:
            client.close()

    def _batch(
        self, flat: list[Any], fetch: list[str], schema: pa.Schema, state: str
    ) -> pa.RecordBatch:
        import pyarrow as pa
        import pyarrow.compute as pc

        width = len(fetch) + 1
        # each field as one Arrow array of the raw replies; every step below is vectorised
        raw = with_record_defaults(
            {name: pa.array(flat[i::width], pa.binary()) for i, name in enumerate(["id", *fetch])}
        )
        rows = len(raw["id"])
        arrays = []
        for f in schema:
            if f.name == "queue":
                arrays.append(pa.repeat(pa.scalar(self.config.target.queue, f.type), rows))
            else:
                arrays.append(column(raw[f.name], f))
        keep = pc.equal(raw["state"], state.encode())
        for name, bound in self.bounds.items():
            keep = pc.and_(keep, _in_bound(column(raw[name], pa.field(name, schema_ts())), bound))
        batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
        return batch.filter(pc.fill_null(keep, False))


def with_record_defaults(raw: dict[str, pa.Array]) -> dict[str, pa.Array]:
    """A record leaves out the fields that hold their default (docs/protocol.md §4.1):
    read them as that default, and a missing run_at as created_at (binary arrays)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for name, values in raw.items():
        default = RECORD_DEFAULTS.get(name)
        if default is not None and values.null_count:
            raw[name] = pc.fill_null(values, pa.scalar(str(default).encode(), pa.binary()))
    if "run_at" in raw and "created_at" in raw and raw["run_at"].null_count:
        raw["run_at"] = pc.coalesce(raw["run_at"], raw["created_at"])
    return raw


def schema_ts() -> pa.DataType:
    import pyarrow as pa

    return pa.timestamp("us", tz="UTC")


def _in_bound(values: pa.Array, bound: Bound) -> pa.Array:
    import pyarrow as pa
    import pyarrow.compute as pc

    keep = pc.is_valid(values)
    micros = values.cast(pa.int64())
    if bound.low is not None:
        op = pc.greater_equal if bound.low_inclusive else pc.greater
        keep = pc.and_(keep, op(micros, bound.low))
    if bound.high is not None:
        op = pc.less_equal if bound.high_inclusive else pc.less
        keep = pc.and_(keep, op(micros, bound.high))
    return keep


class PushdownJobsReader(JobsReader):
    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        from pyspark.sql.datasource import (
            EqualNullSafe,
            EqualTo,
            GreaterThan,
            GreaterThanOrEqual,
            In,
            LessThan,
            LessThanOrEqual,
        )

        ops = {GreaterThan: ">", GreaterThanOrEqual: ">=", LessThan: "<", LessThanOrEqual: "<="}
        for f in filters:
            path: tuple[str, ...] = getattr(f, "attribute", ())
            column_name = path[0] if len(path) == 1 else None
            if column_name == "state" and isinstance(f, EqualTo | EqualNullSafe | In):
                values = f.value if isinstance(f, In) else (f.value,)
                self.states = tuple(s for s in self.states if s in values)
                continue  # exact: the task keeps only rows of the chosen states
            op = ops.get(type(f))
            micros = _micros(getattr(f, "value", None))
            if column_name in _TIME_COLUMNS and op is not None and micros is not None:
                current = self.bounds.get(column_name, Bound())
                self.bounds[column_name] = current.narrowed(op, micros)
            yield f  # Spark re-checks everything but the state choice


def make_reader(options: Options, schema: StructType) -> JobsReader:
    config = ReadConfig.parse(options)
    _check_schema(schema)
    return (PushdownJobsReader if config.pushdown else JobsReader)(config, schema)

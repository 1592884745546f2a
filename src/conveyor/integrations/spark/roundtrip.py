"""`conveyor.spark.apply`: a DataFrame through the queue and back.

Each row becomes a job (through the `conveyor` writer, so every rule of a write holds:
validation, no duplicates, a retried task changes nothing); Conveyor's workers run the jobs
with what Spark cannot give per row (rate limits, fair groups, retries with backoff, failure
handlers, priorities); the driver waits on the queue's events stream (a blocking `XREAD`, no
polling) until every job of the rows has finished; and the rows come back with each job's
outcome joined to them.

Ids are deterministic: the `id_column`, else `<run_id>-<sha1 of task and data>`. Running
`apply` again over the same rows (a re-run of the whole Spark job, or a retried task) finds
the jobs that exist and reuses their outcome instead of running the rows again, while the
jobs are retained (`result_ttl`, one day by default). Equal rows share one job.

Missing no outcome: before anything is enqueued the driver registers itself as a reader of
the events stream (`consumers`, docs/protocol.md §11), so no script trims an event it has not
read; the jobs still pending after the write are then read from their records, and every
later `completed` / `failed` (final) / `cancelled` / `removed` event of one of them ends its
wait.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from conveyor.client.connection import resolve_url
from conveyor.client.models import QueueSettings
from conveyor.errors import ValidationError, WaitTimeoutError
from conveyor.protocol.events import entry_job_ids

from . import store
from .encode import OPTION_COLUMNS
from .options import Target
from .schema import column
from .writer import WRITE_ID_PATTERN

if TYPE_CHECKING:
    import pyarrow as pa
    import redis
    from pyspark.sql import DataFrame

__all__ = ["RESULT_COLUMNS", "apply"]

# The columns `apply` adds to the input rows, in this order.
RESULT_COLUMNS = (
    ("job_id", "string"),
    ("state", "string"),
    ("result", "string"),
    ("error", "string"),
    ("attempts", "int"),
    ("run_time", "double"),
    ("worker", "string"),
)
_RECORD_FIELDS = ("state", "result", "error", "attempts", "started_at", "finished_at", "worker")
# Events after which a job of the rows will not run again on its own.
_ENDS = {b"completed", b"failed", b"cancelled", b"removed"}
_OUTCOME_PAGE = 5000  # ids per SORT
_BLOCK_MS = 5_000  # one blocking read's length; the loop reads again at once


@dataclass(frozen=True, slots=True)
class _Plan:
    target: Target
    task: str
    run_id: str
    id_column: str | None


def apply(
    df: DataFrame,
    *,
    queue: str,
    task: str,
    url: str | None = None,
    prefix: str = "conveyor",
    id_column: str | None = None,
    run_id: str = "apply",
    timeout: float | None = None,
    write_options: Mapping[str, str] | None = None,
) -> DataFrame:
    """Run `task` once per row of `df` on Conveyor's workers; return the rows with
    `job_id`, `state`, `result` (JSON text), `error`, `attempts`, `run_time` (seconds of the
    latest attempt) and `worker` added. Blocks until every job has finished, or raises
    `WaitTimeoutError` after `timeout` seconds (the jobs go on; call again to wait more).

    Columns named like a job option (`priority`, `group`, `delay`, `max_failures`, ...,
    docs/spark.md) set that option of the row's job; a `data` column is the job's data
    (JSON text); otherwise the remaining columns become a JSON object. `write_options` are
    passed to the `conveyor` writer (`chunkSize`, `eventsMaxlen`, ...)."""
    from pyspark.sql import functions as F

    from . import register

    if timeout is not None and timeout <= 0:
        raise ValidationError(f"timeout must be > 0 seconds or None, got {timeout!r}")
    target = Target(resolve_url(url), queue, prefix, QueueSettings().events_maxlen)
    target.keys()  # validates the queue name and the prefix
    if id_column is not None and id_column not in df.columns:
        raise ValidationError(f"id_column {id_column!r} is not a column of the DataFrame")
    plan = _Plan(target, task, _check_run_id(run_id), id_column)
    register(df.sparkSession)
    with_ids = df.withColumn("__conveyor_data", _data_column(df, F)).withColumn(
        "__conveyor_id", _id_column(plan, F)
    )
    client = target.client()
    reader = f"apply-{uuid.uuid4().hex[:16]}"
    pending_key = store.apply_pending_key(target.keys(), reader)
    try:
        position = _register_reader(client, target, reader)
        _write(with_ids, plan, {**(write_options or {}), "pendingKey": pending_key})
        pending = _pending_ids(client, pending_key)
        _wait(client, target, reader, position, pending, timeout)
    finally:
        store.unregister_consumer(client, target.keys(), reader)
        client.delete(pending_key)
        client.close()
    return _with_outcomes(with_ids, plan)


def _check_run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or not WRITE_ID_PATTERN.fullmatch(run_id):
        raise ValidationError(f"run_id must be 1-64 of [A-Za-z0-9_.-], got {run_id!r}")
    return run_id


def _data_column(df: DataFrame, F: Any) -> Any:
    if "data" in df.columns:
        return F.col("data")
    payload = [c for c in df.columns if c not in (*OPTION_COLUMNS, "id", "task")]
    if not payload:
        return F.lit("null")
    return F.to_json(F.struct(*[F.col(f"`{c}`") for c in payload]))


def _id_column(plan: _Plan, F: Any) -> Any:
    if plan.id_column is not None:
        return F.col(f"`{plan.id_column}`").cast("string")
    digest = F.sha1(F.concat_ws("\n", F.lit(plan.task), F.col("__conveyor_data")))
    return F.concat(F.lit(f"{plan.run_id}-"), digest)


def _register_reader(client: redis.Redis, target: Target, reader: str) -> str:
    """Register `reader` at the stream's current end; return that position."""
    last = client.xrevrange(target.keys().events, count=1)
    position = store.stream_id_text(last[0][0]) if last else "0-0"
    store.register_consumer(client, target.keys(), reader, position)
    return position


def _write(with_ids: DataFrame, plan: _Plan, write_options: Mapping[str, str]) -> None:
    options = [c for c in OPTION_COLUMNS if c in with_ids.columns]
    # Equal rows (one id) need no shuffle to meet once: enqueue_skip creates an id once,
    # whether its copies share a call or not.
    frame = with_ids.selectExpr(
        "`__conveyor_id` AS id", "`__conveyor_data` AS data", *[f"`{c}`" for c in options]
    )
    writer = (
        frame.write.format("conveyor")
        .option("url", plan.target.url)
        .option("queue", plan.target.queue)
        .option("prefix", plan.target.prefix)
        .option("task", plan.task)
        .option("writeId", plan.run_id)
        .option("validateData", "true" if "data" in with_ids.columns else "false")
    )
    for name, value in write_options.items():
        writer = writer.option(name, value)
    writer.mode("append").save()


def _pending_ids(client: redis.Redis, pending_key: str) -> set[bytes]:
    """The ids of the rows whose job has not finished, as the write's tasks listed them
    from the scripts' replies (created, or standing in a state that is not final)."""
    blobs: list[bytes] = client.lrange(pending_key, 0, -1)  # type: ignore[assignment]
    return {job_id for blob in blobs for job_id in blob.split(b"\n") if job_id}


def _wait(
    client: redis.Redis,
    target: Target,
    reader: str,
    position: str,
    pending: set[str] | set[bytes],
    timeout: float | None,
) -> None:
    """Read the events stream from `position` until no id of `pending` is left."""
    keys = target.keys()
    deadline = None if timeout is None else time.monotonic() + timeout
    waiting = {i if isinstance(i, bytes) else i.encode() for i in pending}
    while waiting:
        block = _BLOCK_MS
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeoutError(
                    f"{len(waiting)} job(s) of queue {target.queue!r} still unfinished after "
                    f"{timeout} s; they go on running: call apply again to wait for them"
                )
            block = max(1, min(block, round(left * 1000)))
        reply: Any = client.xread({keys.events: position}, count=10_000, block=block)
        for _stream, entries in reply or ():
            for stream_id, fields in entries:
                if fields.get(b"event") in _ENDS:
                    waiting.difference_update(entry_job_ids(fields))
                position = store.stream_id_text(stream_id)
            store.register_consumer(client, keys, reader, position)


def _with_outcomes(with_ids: DataFrame, plan: _Plan) -> DataFrame:
    """The input rows with their job's outcome, read by the executors."""
    target = plan.target
    schema = with_ids.drop("__conveyor_data", "__conveyor_id").schema
    columns = [f.name for f in schema.fields]
    ddl = ", ".join(
        [f"`{f.name}` {f.dataType.simpleString()}" for f in schema.fields]
        + [f"{name} {kind}" for name, kind in RESULT_COLUMNS]
    )

    def outcomes(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        client = target.client()
        try:
            for batch in batches:
                ids = batch.column("__conveyor_id")
                added = _outcome_columns(ids, _read_records(client, target, ids.to_pylist()))
                arrays = [batch.column(name) for name in columns] + list(added.values())
                yield pa.RecordBatch.from_arrays(arrays, names=[*columns, *added])
        finally:
            client.close()

    return with_ids.mapInArrow(outcomes, ddl)


def _read_records(client: redis.Redis, target: Target, ids: list[str]) -> list[Any]:
    """`_RECORD_FIELDS` of each id's record, flat, a page of ids per server call."""
    keys = target.keys()
    flat: list[Any] = []
    for start in range(0, len(ids), _OUTCOME_PAGE):
        flat += store.sort_records(client, keys, ids[start : start + _OUTCOME_PAGE], _RECORD_FIELDS)
    return flat


def _outcome_columns(ids: pa.Array, flat: list[Any]) -> dict[str, pa.Array]:
    """The added columns, built column-wise in Arrow from the records' raw fields."""
    import pyarrow as pa
    import pyarrow.compute as pc

    width = len(_RECORD_FIELDS)
    raw = {name: pa.array(flat[i::width], pa.binary()) for i, name in enumerate(_RECORD_FIELDS)}

    def text(name: str) -> pa.Array:
        values = raw[name]
        try:
            return values.cast(pa.string())
        except pa.ArrowInvalid:  # not UTF-8: decoded with replacement, as the events are
            return pa.array([None if v is None else v.decode("utf-8", "replace")
                             for v in values.to_pylist()], pa.string())  # fmt: skip

    def number(name: str) -> pa.Array:
        return column(raw[name], pa.field(name, pa.int64()))

    state = text("state")
    none = pa.scalar(None, pa.int64())
    present = pc.fill_null(pc.not_equal(state, ""), False)
    started, finished = number("started_at"), number("finished_at")
    return {
        "job_id": ids.cast(pa.string()),
        "state": pc.if_else(present, state, "missing"),
        "result": text("result"),
        "error": text("error"),
        # a record leaves out attempts while it is 0 (docs/protocol.md §4.1)
        "attempts": pc.if_else(present, pc.fill_null(number("attempts"), 0), none).cast(pa.int32()),
        "run_time": pc.divide(pc.subtract(finished, started).cast(pa.float64()), 1000.0),
        "worker": text("worker"),
    }

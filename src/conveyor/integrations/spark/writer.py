"""`df.write.format("conveyor")` and `df.writeStream.format("conveyor")`: rows become jobs.

Each Spark task opens its own Redis connection (from the `url` option, never a pickled
client) and enqueues its partition through a protocol script, with the arguments `ops`
builds: rows are validated and encoded column-wise (`encode.py`), then sent in chunks of
`chunkSize` jobs, `pipelineDepth` chunks per round trip, one round trip in flight while the
next is encoded (`send.py`).

Duplicates: ids are the `id` column, else `<writeId>-<partition>-<row>` (batch) or
`<idPrefix>-<batchId>-<partition>-<row>` (streaming), so a retried task or a replayed
micro-batch produces the same ids. With `ifExists=skip` (the default) an id that is already
a job, in any state, is left alone: by `enqueue_skip` itself for rows with record options
only, else by a look-up before `enqueue`. Every job of a write (or micro-batch) also carries
the enqueue request id `spark-<writeId>`, which `enqueue` recognises on a re-send (what makes
`ifExists=update` safe to retry): then it changes nothing, even for a job already running.
`atomic=true` stages every task's jobs and publishes them only in the driver's commit; an
aborted write leaves nothing behind.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)

from conveyor.client.sync import Queue
from conveyor.errors import ConfigurationError

from . import store
from .encode import Chunk, RowEncoder, check_columns
from .options import Options, Target
from .send import EnqueueSender

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["JobsStreamWriter", "JobsWriter", "WriteConfig", "WriteResult"]

log = logging.getLogger("conveyor.spark")
WRITE_ID_PATTERN = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


@dataclass(frozen=True, slots=True)
class WriteConfig:
    target: Target
    task: str | None
    write_id: str
    if_exists: str  # skip | update
    skip_existing: bool  # look the ids of enqueue calls up first
    atomic: bool
    chunk_size: int
    pipeline_depth: int
    validate_data: bool
    staging_ttl: int
    pending_key: str | None  # apply's: where each task lists the ids whose job will still end
    fail_after_rows: int | None  # testing aid: raise in a task's first attempt

    @classmethod
    def parse(cls, options: Options, columns: Sequence[str], *, streaming: bool) -> WriteConfig:
        target = Target.from_options(options)
        task = options.text("task")
        check_columns(columns, default_task=task)
        if streaming:
            chosen_id = True  # from the checkpoint: the same on every restart
            write_id = options.text("idPrefix") or _checkpoint_token(options)
        else:
            chosen_id = options.text("writeId") is not None
            write_id = options.text("writeId") or uuid.uuid4().hex[:16]
        if not WRITE_ID_PATTERN.fullmatch(write_id):
            raise ConfigurationError(f"writeId/idPrefix {write_id!r}: use 1-64 of A-Za-z0-9_.-")
        fail_after = options.integer("testFailAfterRows", -1, minimum=-1)
        if_exists = options.choice("ifExists", "skip", ("skip", "update"))
        pending_key = options.text("pendingKey")
        if pending_key is not None and not pending_key.startswith(target.keys().base):
            raise ConfigurationError(f"pendingKey must be a key of queue {target.queue!r}")
        config = cls(
            target=target,
            task=task,
            write_id=write_id,
            if_exists=if_exists,
            # Ids made from a fresh random writeId cannot be jobs of an earlier write: the
            # look-up is needed only for an `id` column or a caller's writeId / idPrefix.
            skip_existing=if_exists == "skip" and ("id" in columns or chosen_id),
            atomic=options.flag("atomic", False) and not streaming,
            chunk_size=options.integer("chunkSize", 500, minimum=1),
            pipeline_depth=options.integer("pipelineDepth", 8, minimum=1),
            validate_data=options.flag("validateData", True),
            staging_ttl=options.integer("stagingTtl", 86_400, minimum=60),
            pending_key=pending_key,
            fail_after_rows=None if fail_after < 0 else fail_after,
        )
        options.finish(ignore=("checkpointLocation", "path"))
        return config


def _checkpoint_token(options: Options) -> str:
    import hashlib

    location = options.text("checkpointLocation")
    if location is None:
        raise ConfigurationError(
            "a streaming write needs option checkpointLocation (or idPrefix): "
            "job ids are derived from it so that a replayed micro-batch adds nothing"
        )
    return hashlib.sha1(location.encode()).hexdigest()[:16]


class WriteResult(WriterCommitMessage):
    """What one task did (sent to the driver's commit)."""

    def __init__(
        self, partition: int, attempt: int, rows: int, outcomes: dict[str, int], staged: str | None
    ) -> None:
        self.partition = partition
        self.attempt = attempt
        self.rows = rows
        self.outcomes = outcomes
        self.staged = staged


def _task_context() -> tuple[int, int, str | None]:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:  # called outside Spark (unit tests)
        return 0, 0, None
    batch = context.getLocalProperty("streaming.sql.batchId")
    return context.partitionId(), context.attemptNumber(), batch


class _PartitionWrite:
    """The work of one task: encode, drop existing ids, enqueue or stage."""

    def __init__(
        self, config: WriteConfig, id_prefix: str, request: str, partition: int, attempt: int
    ) -> None:
        self.config = config
        self.partition = partition
        self.attempt = attempt
        self.queue = _queue(config.target)
        self.core = self.queue.core
        self.encoder = RowEncoder(
            self.core,
            default_task=config.task,
            id_prefix=id_prefix,
            request=request,
            validate_data=config.validate_data,
            skip=config.if_exists == "skip",
        )
        self.sender = _sender(self.queue, config)
        self.rows = 0
        self.outcomes: dict[str, int] = {}
        self.staged: str | None = None

    def run(self, batches: Iterator[pa.RecordBatch]) -> WriteResult:
        self.queue.check()
        try:
            for batch in batches:
                if batch.num_rows:
                    self._batch(batch)
            if not self.config.atomic:
                self.outcomes = self.sender.flush()
                _push_pending(self.queue, self.config, self.sender)
        finally:
            self.sender.close()
            self.queue.close()
        return WriteResult(self.partition, self.attempt, self.rows, self.outcomes, self.staged)

    def _batch(self, batch: pa.RecordBatch) -> None:
        config = self.config
        chunks = self.encoder.encode(batch, self.rows).split(config.chunk_size)
        if config.atomic:
            self._stage(chunks)
        else:
            for chunk in chunks:
                self.sender.add(chunk)
        self.rows += batch.num_rows
        limit = config.fail_after_rows
        if limit is not None and self.attempt == 0 and self.rows >= limit:
            self.sender.flush()  # what was encoded so far is in Redis, as a crash would leave
            raise RuntimeError(f"testFailAfterRows: failing after {self.rows} rows (as asked)")

    def _stage(self, chunks: Sequence[Chunk]) -> None:
        keys = self.core.keys
        if self.staged is None:
            self.staged = store.staging_key(
                keys, self.config.write_id, self.partition, self.attempt
            )
        store.stage(
            self.queue.client,
            keys,
            self.config.write_id,
            self.staged,
            [store.encode_chunk(chunk) for chunk in chunks],
            self.config.staging_ttl,
        )
        self.outcomes["staged"] = self.outcomes.get("staged", 0) + sum(c.count for c in chunks)


def _queue(target: Target) -> Queue:
    """A Queue on a new connection of this process (a task's or the driver's)."""
    return Queue(target.queue, client=target.client(), settings=target.settings())


def _sender(queue: Queue, config: WriteConfig) -> EnqueueSender:
    return EnqueueSender(
        queue.client,
        queue.core,
        depth=config.pipeline_depth,
        skip_existing=config.skip_existing,
        track_pending=config.pending_key is not None,
    )


def _push_pending(queue: Queue, config: WriteConfig, sender: EnqueueSender) -> None:
    """With `pendingKey` (apply's): append the ids of this task's jobs that will still end,
    told by the scripts' replies, so the driver needs no pass over the rows to find them.
    A failed attempt may have listed some too: jobs it created or found unfinished, which
    end later all the same."""
    if config.pending_key is None:
        return
    blobs = sender.pending_ids()
    with queue.client.pipeline(transaction=False) as pipe:
        for blob in blobs:
            pipe.rpush(config.pending_key, blob)
        pipe.expire(config.pending_key, config.staging_ttl)
        pipe.execute()


def _summary(messages: Sequence[WriterCommitMessage | None]) -> dict[str, int]:
    total: dict[str, int] = {"rows": 0}
    for message in messages:
        if isinstance(message, WriteResult):
            total["rows"] += message.rows
            for name, count in message.outcomes.items():
                total[name] = total.get(name, 0) + count
    return total


class JobsWriter(DataSourceArrowWriter):
    """Batch write. Created on the driver, pickled to every task, used again on the driver
    for commit/abort, so `write_id` (drawn once) is shared by all tasks and the commit."""

    def __init__(self, config: WriteConfig) -> None:
        self.config = config

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        partition, attempt, _ = _task_context()
        prefix = f"{self.config.write_id}-{partition}"
        request = f"spark-{self.config.write_id}"
        return _PartitionWrite(self.config, prefix, request, partition, attempt).run(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.config.atomic:
            self._publish(messages)
        log.info("conveyor write %s committed: %s", self.config.write_id, _summary(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.config.atomic:
            target = self.config.target
            client = target.client()
            try:
                dropped = store.drop_staging(
                    client, target.keys(), self.config.write_id, aborted=True
                )
            finally:
                client.close()
            log.warning(
                "conveyor write %s aborted: %d staged parts dropped", self.config.write_id, dropped
            )

    def _publish(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        """Move the staged jobs of the successful task attempts into the queue. Enqueue is
        idempotent per id, so a commit that died half-way can simply be run again."""
        config = self.config
        queue = _queue(config.target)
        sender = _sender(queue, config)
        try:
            queue.check()
            for message in messages:
                if isinstance(message, WriteResult) and message.staged is not None:
                    for chunk in store.staged_chunks(queue.client, message.staged):
                        sender.add(chunk)
            sender.flush()
            _push_pending(queue, config, sender)
            store.drop_staging(queue.client, queue.core.keys, config.write_id)
        finally:
            sender.close()
            queue.close()


class JobsStreamWriter(DataSourceStreamWriter):
    """Streaming write: each micro-batch enqueues directly; ids carry the batch id, so a
    batch Spark replays after a restart enqueues nothing new."""

    def __init__(self, config: WriteConfig) -> None:
        self.config = config

    def write(self, iterator: Iterator[Any]) -> WriteResult:
        partition, attempt, batch_id = _task_context()
        batch = f"{self.config.write_id}-{batch_id or 0}"
        writer = _PartitionWrite(
            self.config, f"{batch}-{partition}", f"spark-{batch}", partition, attempt
        )
        return writer.run(_as_batches(iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info("conveyor stream batch %d committed: %s", batchId, _summary(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("conveyor stream batch %d aborted; a replay re-enqueues it safely", batchId)


def _as_batches(iterator: Iterator[Any], size: int = 10_000) -> Iterator[pa.RecordBatch]:
    """Rows (pyspark Row) or Arrow batches, as Arrow batches."""
    import pyarrow as pa

    rows: list[dict[str, Any]] = []
    for item in iterator:
        if isinstance(item, pa.RecordBatch):
            yield item
            continue
        rows.append(item.asDict(recursive=True))
        if len(rows) >= size:
            yield pa.RecordBatch.from_pylist(rows)
            rows = []
    if rows:
        yield pa.RecordBatch.from_pylist(rows)


def make_writer(options: Options, schema: StructType, *, streaming: bool) -> Any:
    config = WriteConfig.parse(options, [f.name for f in schema.fields], streaming=streaming)
    return JobsStreamWriter(config) if streaming else JobsWriter(config)

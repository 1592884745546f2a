"""`format("conveyor_forget")`, used by the archive: remove archived finished jobs.

Each row is `(id string, finished_at timestamp)`, read back from Parquet the archive has
already committed. A job is removed only if its record is still completed or failed with
that very `finished_at` (`store.forget_finished`), so running the same removal twice, or
after the id was enqueued anew, is harmless.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

from conveyor.client.sync import Queue
from conveyor.errors import ConfigurationError

from . import store
from .options import Options, Target

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["ForgetDataSource", "Forgotten"]


class Forgotten(WriterCommitMessage):
    def __init__(self, removed: int, kept: int) -> None:
        self.removed = removed
        self.kept = kept


@dataclass(frozen=True, slots=True)
class ForgetWriter(DataSourceArrowWriter):
    target: Target
    batch: int
    report_key: str | None  # where commit() leaves {removed, kept} for the caller

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Forgotten:
        import pyarrow as pa

        queue = Queue(self.target.queue, client=self.target.client(),
                      settings=self.target.settings())  # fmt: skip
        removed = kept = 0
        try:
            for batch in iterator:
                ids = batch.column("id").to_pylist()
                micros = batch.column("finished_at").cast(pa.int64()).to_pylist()
                items = [(i, m // 1000) for i, m in zip(ids, micros, strict=True) if i and m]
                r, k = store.forget_finished(queue.runner, queue.core.keys, items,
                                             batch=self.batch)  # fmt: skip
                removed, kept = removed + r, kept + k
        finally:
            queue.close()
        return Forgotten(removed, kept)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to publish (each removal is final and idempotent): leave the totals."""
        if self.report_key is None:
            return
        done = [m for m in messages if isinstance(m, Forgotten)]
        client = self.target.client()
        try:
            client.hset(
                self.report_key,
                mapping={
                    "removed": sum(m.removed for m in done),
                    "kept": sum(m.kept for m in done),
                },
            )
            client.expire(self.report_key, 86_400)
        finally:
            client.close()


class ForgetDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "conveyor_forget"

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        names = {f.name for f in schema.fields}
        if not {"id", "finished_at"} <= names:
            raise ConfigurationError("conveyor_forget needs columns id and finished_at")
        options = Options(self.options, source=self.name())
        target = Target.from_options(options)
        report_key = options.text("reportKey")
        if report_key is not None and not report_key.startswith(target.keys().base):
            raise ConfigurationError("reportKey must be a key of the queue (same prefix)")
        writer = ForgetWriter(target, options.integer("batchSize", 200, minimum=1), report_key)
        options.finish()
        return writer

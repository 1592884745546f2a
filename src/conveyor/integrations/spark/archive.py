"""`conveyor archive`: copy finished jobs into Parquet, then remove them from Redis.

Layout: `<path>/queue=<queue>/day=<YYYY-MM-DD>/part-*.parquet` (day of `finished_at`, UTC),
columns `JOBS_DDL` plus `archive_run` and `archived_at`.

Per queue, under a lock (one archive per queue at a time):

1. finish any earlier run that stopped between its Parquet commit and its removals: read
   the rows that run committed (by `archive_run`) and remove those jobs from Redis;
2. record a new run id as pending, in Redis;
3. read the finished jobs (`states=completed,failed`, optionally finished before a cutoff)
   and append them to the Parquet dataset: Spark's commit makes the files visible;
4. read back exactly the rows this run committed and remove those jobs, each only if its
   record is still the one archived (same `finished_at`);
5. clear the pending mark.

A crash anywhere leaves either no committed rows (the jobs are still in Redis and the next
run archives them) or committed rows whose removal step 1 of the next run completes before
reading anything new, so a re-run neither loses nor duplicates a job.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from conveyor.errors import ConfigurationError

from .options import Target, parse_instant_ms

if TYPE_CHECKING:
    import redis
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["ArchiveResult", "archive"]

log = logging.getLogger("conveyor.spark")
LOCK_TTL_MS = 15 * 60 * 1000
# The copy hands each task's rows to a file writer per (queue, day) without sorting them
# first, for up to WRITERS of them (Spark sorts whatever a task has beyond that, as it did
# for all rows before); a queue's day is one. The 1,000,000-row copy on 2 cores: about a
# tenth faster than with the sort.
WRITERS_CONF = "spark.sql.maxConcurrentOutputFileWriters"
WRITERS = 2


@dataclass(frozen=True, slots=True)
class ArchiveResult:
    queue: str
    run_id: str
    archived: int  # rows this run committed to Parquet
    removed: int  # jobs removed from Redis (this run and any recovered one)
    kept: int  # archived rows whose job had changed meanwhile (left in Redis)
    recovered_runs: int
    seconds: float
    copy_seconds: float = 0.0  # reading the jobs and writing Parquet
    remove_seconds: float = 0.0  # reading back what was committed, removing it from Redis


def _keys(target: Target) -> tuple[str, str]:
    base = target.keys().base
    return base + "archive:lock", base + "archive:pending"


def archive(
    spark: SparkSession,
    url: str,
    path: str,
    queues: Sequence[str],
    *,
    prefix: str = "conveyor",
    finished_before: str | None = None,
    fail_after_write: bool = False,
    on_commit: Callable[[str], None] | None = None,
) -> list[ArchiveResult]:
    """Archive the finished jobs of `queues` under `path` (any Hadoop path: local, HDFS,
    S3A ...). `finished_before` (ISO-8601 or epoch seconds) keeps newer jobs in Redis.
    `on_commit(queue)` is called once a queue's rows are committed, before their jobs are
    removed: the dataset can be read from then on (the pipeline's report starts there).
    `fail_after_write` is a testing aid that stops after the Parquet commit."""
    from . import register

    register(spark)
    if finished_before is not None:
        parse_instant_ms(finished_before)  # fail early on a bad value
    results = []
    for queue in queues:
        target = Target(url=url, queue=queue, prefix=prefix, events_maxlen=10_000)
        results.append(
            _archive_queue(spark, target, path, finished_before, fail_after_write, on_commit)
        )
    return results


def _archive_queue(
    spark: SparkSession,
    target: Target,
    path: str,
    finished_before: str | None,
    fail_after_write: bool,
    on_commit: Callable[[str], None] | None,
) -> ArchiveResult:
    started = time.monotonic()
    lock, pending = _keys(target)
    client = target.client()
    token = uuid.uuid4().hex
    if not client.set(lock, token, nx=True, px=LOCK_TTL_MS):
        client.close()
        raise ConfigurationError(
            f"another archive of queue {target.queue!r} is running (lock {lock}; it expires "
            f"{LOCK_TTL_MS // 60000} min after that run started, should it have died)"
        )
    try:
        removed = kept = 0
        earlier = {_text(k): json.loads(v) for k, v in client.hgetall(pending).items()}
        for run_id, info in earlier.items():
            r, k = _forget_run(spark, target, info["path"], run_id)
            removed, kept = removed + r, kept + k
            client.hdel(pending, run_id)
        run_id = uuid.uuid4().hex[:16]
        client.hset(pending, run_id, json.dumps({"path": path, "started": time.time()}))
        client.pexpire(lock, LOCK_TTL_MS)
        copying = time.monotonic()
        jobs = _finished_jobs(spark, target, finished_before, run_id)
        with _unsorted_writes(spark):
            jobs.write.mode("append").partitionBy("queue", "day").parquet(path)
        if fail_after_write:
            raise RuntimeError("fail_after_write: stopping after the Parquet commit (as asked)")
        if on_commit is not None:
            on_commit(target.queue)
        client.pexpire(lock, LOCK_TTL_MS)
        removing = time.monotonic()
        r, k = _forget_run(spark, target, path, run_id)
        client.hdel(pending, run_id)
        return ArchiveResult(
            queue=target.queue,
            run_id=run_id,
            archived=r + k,  # every committed row is either removed or kept
            removed=removed + r,
            kept=kept + k,
            recovered_runs=len(earlier),
            seconds=round(time.monotonic() - started, 3),
            copy_seconds=round(removing - copying, 3),
            remove_seconds=round(time.monotonic() - removing, 3),
        )
    finally:
        _release(client, lock, token)
        client.close()


@contextmanager
def _unsorted_writes(spark: SparkSession) -> Iterator[None]:
    """WRITERS concurrent file writers for the copy, unless the session chose a number."""
    chosen = spark.conf.get(WRITERS_CONF, None)
    if chosen is not None:
        yield
        return
    spark.conf.set(WRITERS_CONF, str(WRITERS))
    try:
        yield
    finally:
        spark.conf.unset(WRITERS_CONF)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _release(client: redis.Redis, lock: str, token: str) -> None:
    """Drop the lock if it is still ours (a GET then DEL race only shortens someone
    else's lock, which then fails safe: the pending mark makes the next run recover)."""
    if _text(client.get(lock) or b"") == token:
        client.delete(lock)


def _finished_jobs(
    spark: SparkSession, target: Target, finished_before: str | None, run_id: str
) -> DataFrame:
    from pyspark.sql import functions as F

    reader = (
        spark.read.format("conveyor")
        .option("url", target.url)
        .option("queue", target.queue)
        .option("prefix", target.prefix)
        .option("states", "completed,failed")
    )
    if finished_before is not None:
        reader = reader.option("finishedBefore", finished_before)
    day = F.date_from_unix_date(F.floor(F.unix_micros("finished_at") / 86_400_000_000).cast("int"))
    return (
        reader.load()
        .withColumn("archive_run", F.lit(run_id))
        .withColumn("archived_at", F.current_timestamp())
        .withColumn("day", day)
    )


def _committed(spark: SparkSession, path: str, queue: str, run_id: str) -> DataFrame:
    from pyspark.sql import functions as F

    try:
        data = spark.read.parquet(path)
    except Exception as exc:  # AnalysisException: the dataset does not exist (yet)
        if "PATH_NOT_FOUND" in str(exc) or "Path does not exist" in str(exc):
            return spark.createDataFrame([], "id string, finished_at timestamp")
        raise
    return data.where((F.col("queue") == queue) & (F.col("archive_run") == run_id)).select(
        "id", "finished_at"
    )


def _forget_run(spark: SparkSession, target: Target, path: str, run_id: str) -> tuple[int, int]:
    """Remove from Redis the jobs a run committed to `path`; (removed, kept)."""
    report = target.keys().base + "archive:removed:" + run_id
    (
        _committed(spark, path, target.queue, run_id)
        .write.format("conveyor_forget")
        .option("url", target.url)
        .option("queue", target.queue)
        .option("prefix", target.prefix)
        .option("reportKey", report)
        .mode("append")
        .save()
    )
    client = target.client()
    try:
        counts = {_text(k): int(v) for k, v in client.hgetall(report).items()}
        client.delete(report)
    finally:
        client.close()
    return counts.get("removed", 0), counts.get("kept", 0)

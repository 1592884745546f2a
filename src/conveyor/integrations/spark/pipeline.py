"""The data pipeline demo: Spark enqueues, workers drain, Spark reads back and reports.

    run_pipeline(spark, url, rows=100_000)     # what `make demo` calls after its own part

1. Spark generates `rows` orders and writes them with `format("conveyor")` (the payload
   columns become each job's JSON data; `priority`, `min_backoff`, `max_backoff` columns
   become options);
2. `workers` worker processes run `pipeline.score` in burst mode until the queue is empty,
   starting with the first enqueued job (about 2% of first attempts fail and are retried,
   0.1% of jobs fail for good);
3. `archive` reads every job back (`format("conveyor")`), writes the finished ones to
   Parquet by queue and day, then removes them from Redis;
4. `report` reads the archive and every event (`format("conveyor_events")`) and writes the
   HTML and JSON report. It overlaps the archive: the events are read from the archive's
   start, the archived jobs from its Parquet commit on, while it removes them from Redis.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conveyor.client.models import QueueSettings
from conveyor.client.sync import Queue
from conveyor.client.tasks import Tasks
from conveyor.errors import ConfigurationError, PermanentError
from conveyor.job import JobState

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from .report import Activity, ReportPaths

__all__ = ["PipelineResult", "demo_tasks", "main", "orders", "run_pipeline"]

TASK = "pipeline.score"
# The workers run at a lower CPU priority: Redis, one thread, is what every step waits on,
# and on a machine whose cores the workers, Spark and Redis share, three busy processes on two
# cores left Redis a core only two thirds of the time. Draining 1,000,000 written jobs with 2
# workers on 2 cores took about a fifth less time with the workers at niceness 5.
WORKER_NICENESS = 5
# Slots per worker. A worker claims when half its slots are free, so the slots set how many
# jobs one claim script and one outcome batch carry; the pipeline's handler is quick, and
# bigger batches cost Redis fewer µs per job. The 1,000,000-row pipeline on 2 cores drained
# about twice as fast at 256 as at 64, and a little faster again at 512.
WORKER_CONCURRENCY = 512


@dataclass(slots=True)
class PipelineResult:
    queue: str
    rows: int
    out_dir: str
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    report_html: str | None = None
    report_json: str | None = None
    seconds: float = 0.0


def demo_tasks(queue: str, *, prefix: str = "conveyor", events_maxlen: int = 10_000) -> Tasks:
    """The demo's one task. Deterministic by id: a few first attempts fail (retried), a
    few jobs fail for good, so the report has something to show."""
    from conveyor.worker import current_job

    tasks = Tasks(queue, settings=QueueSettings(prefix=prefix, events_maxlen=events_maxlen))

    @tasks.task(name=TASK)
    async def score(data: dict[str, Any]) -> dict[str, Any]:
        job = current_job()
        bucket = zlib.crc32(job.id.encode()) % 1000
        if bucket == 7:
            raise PermanentError(f"customer {data.get('customer')} is blocked")
        if bucket < 20 and job.attempt == 1:
            raise ConnectionError("payment gateway timed out")
        return {"score": round(float(data.get("amount", 0)) * 1.07, 2)}

    return tasks


def _worker_main(
    url: str, queue: str, prefix: str, events_maxlen: int, concurrency: int, niceness: int = 0
) -> None:
    """One worker process: drain the queue, then exit (burst mode). `niceness` lowers its
    CPU priority first (POSIX), so that a Redis on the same cores runs whenever it can."""
    from conveyor.worker import Worker, WorkerSettings

    if niceness > 0 and hasattr(os, "nice"):
        os.nice(niceness)

    # the demo's planned failures are in its report: no traceback printed for each
    logging.getLogger("conveyor.jobs").setLevel(logging.ERROR)

    tasks = demo_tasks(queue, prefix=prefix, events_maxlen=events_maxlen)
    settings = WorkerSettings(concurrency=concurrency, burst=True, idle_wait=2.0)
    Worker(tasks, url=url, settings=settings).run_sync()


class _Drain:
    """Worker processes in burst mode, started as soon as the first job is enqueued (so
    draining overlaps the Spark write) and restarted until the queue has nothing left."""

    def __init__(
        self,
        url: str,
        queue: str,
        prefix: str,
        maxlen: int,
        workers: int,
        concurrency: int,
        niceness: int = 0,
    ) -> None:
        self.args = (url, queue, prefix, maxlen, concurrency, niceness)
        self.queue = Queue(queue, url=url, settings=QueueSettings(prefix=prefix))
        self.workers = workers
        self.writing = True
        self.processes: list[Any] = []
        self.thread: threading.Thread | None = None

    def _unfinished(self) -> int:
        counts = self.queue.counts()
        done = (JobState.COMPLETED, JobState.FAILED)
        return sum(n for state, n in counts.items() if state not in done)

    def _spawn(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.processes = [
            context.Process(target=_worker_main, args=self.args, daemon=True)
            for _ in range(self.workers)
        ]
        for process in self.processes:
            process.start()

    def start_on_first_job(self) -> None:
        def wait_then_spawn() -> None:
            while self.writing and not self._unfinished():
                self.queue.events(after="$", block=0.5)  # wakes on the first event
            self._spawn()

        self.thread = threading.Thread(target=wait_then_spawn, daemon=True)
        self.thread.start()

    def finish(self) -> int:
        """Wait until every job is completed or failed; returns how many are."""
        if self.thread is not None:
            self.thread.join()
        while True:
            for process in self.processes:
                process.join()
            if not self._unfinished():
                break
            self._spawn()  # burst workers left early (the write was slower): again
        counts = self.queue.counts()
        self.queue.close()
        return counts[JobState.COMPLETED] + counts[JobState.FAILED]


def orders(spark: SparkSession, rows: int, *, tag: str, partitions: int = 2) -> DataFrame:
    """`rows` generated orders: id, customer, amount, region, and job options as columns."""
    return spark.range(rows, numPartitions=partitions).selectExpr(
        f"concat('{tag}-', id) AS id",
        "cast(id % 50000 AS int) AS customer",
        "round(rand(7) * 500, 2) AS amount",
        "element_at(array('eu', 'us', 'apac'), cast(id % 3 AS int) + 1) AS region",
        "cast(id % 3 AS int) * 1000 AS priority",  # 0 (high), 1000 (normal), 2000 (low)
        "0.2 AS min_backoff",
        "1.0 AS max_backoff",
    )


def _timed(result: PipelineResult, name: str, label: str, say: Callable[[str], None]) -> Any:
    class Step:
        def __enter__(self) -> dict[str, Any]:
            self.started = time.monotonic()
            self.info: dict[str, Any] = {}
            return self.info

        def __exit__(self, *exc: object) -> None:
            seconds = time.monotonic() - self.started
            self.info["seconds"] = round(seconds, 2)
            count = self.info.get("rows")
            if count:
                self.info["rows_per_s"] = round(count / seconds)
            result.steps[name] = self.info
            say(f"  {label}: " + ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}"
                                          for k, v in self.info.items()))  # fmt: skip

    return Step()


class _Reporting:
    """The report, overlapping the archive: its events (final once the workers have stopped)
    are read from the archive's start, its archived jobs from the archive's Parquet commit
    on, while the archive removes those jobs from Redis. Each step alone leaves a core idle
    part of the time (the removal waits on the one Redis thread, the events read on Python
    workers); two Spark jobs from two threads fill it."""

    def __init__(self, spark: SparkSession, url: str, queue: str, prefix: str, out: Path):
        from .report import event_activity

        self.spark, self.url, self.queue, self.prefix, self.out = spark, url, queue, prefix, out
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="pipeline-report")
        self.events_seconds = 0.0

        def read_events() -> Activity:
            started = time.monotonic()
            activity = event_activity(spark, url, [queue], prefix)
            self.events_seconds = round(time.monotonic() - started, 2)
            return activity

        self.activity = self.pool.submit(read_events)
        self.paths: Future[ReportPaths] | None = None

    def committed(self, queue: str) -> None:
        """The archive's `on_commit`: the archived jobs can be read from now on."""
        self.paths = self.pool.submit(self._report)

    def _report(self) -> ReportPaths:
        from .report import report

        return report(
            self.spark, str(self.out / "report"), archive_path=str(self.out / "archive"),
            url=self.url, queues=[self.queue], prefix=self.prefix, live_jobs=False,
            activity=self.activity.result(),
        )  # fmt: skip

    def result(self) -> ReportPaths:
        if self.paths is None:
            raise RuntimeError("the archive did not commit: no report")
        try:
            return self.paths.result()
        finally:
            self.pool.shutdown()

    def abandon(self) -> None:
        """The archive failed: stop waiting (a Spark job still running ends with the
        session)."""
        self.pool.shutdown(wait=False, cancel_futures=True)


def _check_workers(workers: int, concurrency: int) -> None:
    """Before anything is written: a worker that cannot start would leave the drain
    restarting workers for ever."""
    from conveyor.worker import WorkerSettings

    if workers < 1:
        raise ConfigurationError(f"workers must be at least 1, got {workers}")
    WorkerSettings(concurrency=concurrency)  # its own ConfigurationError


def run_pipeline(
    spark: SparkSession,
    url: str,
    rows: int = 100_000,
    *,
    queue: str = "pipeline",
    prefix: str = "conveyor",
    workers: int = 2,
    concurrency: int = WORKER_CONCURRENCY,
    worker_niceness: int = WORKER_NICENESS,
    out_dir: str = "conveyor-pipeline",
    partitions: int = 2,
    say: Callable[[str], None] = print,
) -> PipelineResult:
    """Run the whole pipeline against the Redis at `url`; returns timings and the report's
    paths. Works the same on `local[*]` and on a cluster (then `out_dir` must be a path
    every executor can write, e.g. on HDFS or S3, for the archive)."""
    from . import register
    from .archive import archive

    _check_workers(workers, concurrency)
    register(spark)
    started = time.monotonic()
    out = Path(out_dir)
    result = PipelineResult(queue=queue, rows=rows, out_dir=str(out.resolve()))
    maxlen = max(10_000, rows * 6)  # every event kept until Spark has read it
    tag = time.strftime("o%Y%m%d%H%M%S")
    say(f"pipeline: {rows:,} jobs through queue {queue!r}")

    drain = _Drain(url, queue, prefix, maxlen, workers, concurrency, worker_niceness)
    with _timed(
        result, "enqueue", "enqueue (Spark write; workers start on the first job)", say
    ) as info:
        drain.start_on_first_job()
        try:
            (
                orders(spark, rows, tag=tag, partitions=partitions)
                .write.format("conveyor")
                .option("url", url)
                .option("queue", queue)
                .option("prefix", prefix)
                .option("task", TASK)
                .option("eventsMaxlen", str(maxlen))
                .mode("append")
                .save()
            )
        finally:
            drain.writing = False
        info["rows"] = rows
    with _timed(result, "drain", "drain (rest of the backlog)", say) as info:
        info["finished"] = drain.finish()
        info["workers"] = workers
    reporting = _Reporting(spark, url, queue, prefix, out)
    try:
        with _timed(result, "archive", "archive (the report's reads overlap it)", say) as info:
            done = archive(spark, url, str(out / "archive"), [queue], prefix=prefix,
                           on_commit=reporting.committed)[0]  # fmt: skip
            info.update(rows=done.archived, removed=done.removed, copy_seconds=done.copy_seconds,
                        remove_seconds=done.remove_seconds)  # fmt: skip
    except BaseException:
        reporting.abandon()
        raise
    with _timed(result, "report", "report (what it takes after the archive)", say) as info:
        paths = reporting.result()
        result.report_html, result.report_json = paths.html, paths.json
        info["events"] = sum(paths.summary.get("events", {}).values())
        info["by_event"] = paths.summary.get("events", {})
        # the events read from the archive's start, the rest of the report from its commit
        info["events_seconds"] = reporting.events_seconds
        info["after_commit_seconds"] = paths.summary.get("seconds")
    result.seconds = round(time.monotonic() - started, 2)
    say(f"pipeline done in {result.seconds} s")
    say(f"report: {result.report_html}")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m conveyor.integrations.spark.pipeline`: the demo pipeline on its own."""
    import json
    import os

    parser = argparse.ArgumentParser(description="Conveyor's Spark data pipeline demo")
    parser.add_argument("--url", default=os.environ.get("CONVEYOR_REDIS_URL"))
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--million", action="store_true", help="1,000,000 rows")
    parser.add_argument("--queue", default="pipeline")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--concurrency", type=int, default=WORKER_CONCURRENCY, help="slots per worker"
    )
    parser.add_argument("--out", default="conveyor-pipeline")
    parser.add_argument("--master", help="Spark master (default local[*])")
    args = parser.parse_args(argv)
    if not args.url:
        parser.error("--url (or CONVEYOR_REDIS_URL) is required")
    from .session import build_session

    spark = build_session(args.master, app_name="conveyor-pipeline")
    try:
        result = run_pipeline(
            spark,
            args.url,
            1_000_000 if args.million else args.rows,
            queue=args.queue,
            workers=args.workers,
            concurrency=args.concurrency,
            out_dir=args.out,
        )
    finally:
        spark.stop()
    print(json.dumps(asdict(result), indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

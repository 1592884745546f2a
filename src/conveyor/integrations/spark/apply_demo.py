"""The `apply` demo: a DataFrame of rows calls a rate-limited "external API" through the
queue, and comes back with each row's outcome.

    run_apply_demo(spark, url, rows=100_000)   # what `make demo` runs after the pipeline

The handler stands for a call to an API that allows `rate` requests a second: the queue's
rate limit (`Queue.set_limits(rate=...)`) holds every worker to it, a few calls time out
once and are retried with backoff, and the rows of one tenant share a fair group.
"""

from __future__ import annotations

import logging
import multiprocessing
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from conveyor.client.models import QueueSettings
from conveyor.client.sync import Queue
from conveyor.client.tasks import Tasks

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["ApplyDemoResult", "api_tasks", "run_apply_demo"]

TASK = "api.enrich"


@dataclass(frozen=True, slots=True)
class ApplyDemoResult:
    rows: int
    seconds: float
    by_state: dict[str, int]
    retried_rows: int
    run_time_p50_ms: float
    run_time_p99_ms: float
    rate_limit: int


def api_tasks(queue: str) -> Tasks:
    """The demo's API call: about 1 ms of I/O; 1% of first calls time out (retried)."""
    import asyncio

    from conveyor.worker import current_job

    tasks = Tasks(queue)

    @tasks.task(name=TASK, max_failures=3, min_backoff=0.05, max_backoff=0.5)
    async def enrich(data: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0.001)
        job = current_job()
        if zlib.crc32(job.id.encode()) % 100 == 0 and job.attempt == 1:
            raise TimeoutError("the API did not answer in time")
        return {"customer": data["customer"], "segment": "gold" if data["amount"] > 400 else ""}

    return tasks


def _worker_main(url: str, queue: str, concurrency: int) -> None:
    from conveyor.worker import Worker, WorkerSettings

    # the demo's planned failures are in its report: no traceback printed for each
    logging.getLogger("conveyor.jobs").setLevel(logging.ERROR)

    settings = WorkerSettings(concurrency=concurrency, burst=False)
    Worker(api_tasks(queue), url=url, settings=settings).run_sync()


def run_apply_demo(
    spark: SparkSession,
    url: str,
    rows: int = 100_000,
    *,
    queue: str = "api",
    rate: int = 20_000,
    workers: int = 2,
    concurrency: int = 100,
    say: Callable[[str], None] = print,
) -> ApplyDemoResult:
    """Rows -> jobs -> rows with outcomes, with the queue limited to `rate` calls a second."""
    from pyspark.sql import functions as F

    from .roundtrip import apply

    with Queue(queue, url=url, settings=QueueSettings()) as q:
        q.set_limits(rate=rate, per=1)
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=_worker_main, args=(url, queue, concurrency), daemon=True)
        for _ in range(workers)
    ]
    for process in processes:
        process.start()
    say(f"apply: {rows:,} rows through queue {queue!r}, the API limited to {rate:,} calls/s")
    df = spark.range(rows, numPartitions=2).selectExpr(
        "cast(id % 50000 AS int) AS customer",
        "round(rand(11) * 500, 2) AS amount",
        "concat('tenant-', cast(id % 5 AS string)) AS `group`",
        "id AS row",
    )
    started = time.monotonic()
    try:
        out = apply(df, queue=queue, task=TASK, url=url, run_id=f"demo{int(time.time())}")
        stats = out.agg(
            F.count("*").alias("rows"),
            F.sum(F.when(F.col("attempts") > 1, 1).otherwise(0)).alias("retried"),
            F.percentile_approx("run_time", 0.5).alias("p50"),
            F.percentile_approx("run_time", 0.99).alias("p99"),
        ).first()
        states = {r["state"]: r["count"] for r in out.groupBy("state").count().collect()}
    finally:
        for process in processes:
            process.terminate()
            process.join(10)
    seconds = round(time.monotonic() - started, 2)
    assert stats is not None
    result = ApplyDemoResult(
        rows=stats["rows"], seconds=seconds, by_state=states, retried_rows=stats["retried"],
        run_time_p50_ms=round((stats["p50"] or 0) * 1000, 2),
        run_time_p99_ms=round((stats["p99"] or 0) * 1000, 2), rate_limit=rate,
    )  # fmt: skip
    say(
        f"  {result.rows:,} rows back in {seconds} s ({result.rows / seconds:,.0f} rows/s, "
        f"limit {rate:,}/s): {states}; {result.retried_rows:,} rows needed a retry; "
        f"run time p50 {result.run_time_p50_ms} ms, p99 {result.run_time_p99_ms} ms"
    )
    return result

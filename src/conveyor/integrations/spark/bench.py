"""Spark throughput against Conveyor's own bulk enqueue (for `make bench`).

    python -m conveyor.integrations.spark.bench [--url URL] [--rows 100000] [--read 1000000]

Measures, on one Redis (a private one when no --url is given):

* `enqueue_many`: `Queue.enqueue_many` from one process (the baseline);
* `spark_write`: `df.write.format("conveyor")` of the same number of rows, after a warm-up
  write (JVM start-up and Python worker start are not counted);
* `spark_read`: `spark.read.format("conveyor")` of `--read` jobs into Spark's `noop` sink
  (every row materialised, nothing collected);
* `spark_events`: `spark.read.format("conveyor_events")` of every event of those jobs.

Prints one JSON object: rows, seconds and rows/s per measure, and the targets met.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["TARGETS", "main", "measure"]

TARGETS = {"spark_write": 50_000, "spark_read": 40_000, "spark_events": 60_000}


def _rate(rows: int, seconds: float) -> dict[str, Any]:
    return {"rows": rows, "seconds": round(seconds, 2), "rows_per_s": round(rows / seconds)}


def _spark_write(spark: SparkSession, url: str, queue: str, rows: int, partitions: int) -> None:
    from .pipeline import orders

    (
        orders(spark, rows, tag=queue, partitions=partitions)
        .write.format("conveyor")
        .option("url", url)
        .option("queue", queue)
        .option("task", "bench")
        .option("eventsMaxlen", str(10 * rows + 10_000))
        .mode("append")
        .save()
    )


def measure(spark: SparkSession, url: str, rows: int, read_rows: int) -> dict[str, Any]:
    import redis

    from conveyor.client.core import JobRequest, QueueSettings
    from conveyor.client.sync import Queue

    from . import register

    register(spark)
    settings = QueueSettings(events_maxlen=10 * max(rows, read_rows) + 10_000)
    results: dict[str, Any] = {}
    stamp = time.strftime("%H%M%S")

    with Queue(f"bench-base-{stamp}", url=url, settings=settings) as queue:
        requests = [
            JobRequest("bench", {"customer": n % 50_000, "amount": n * 0.5}, {"id": f"b{n}"})
            for n in range(rows)
        ]
        started = time.perf_counter()
        queue.enqueue_many(requests, chunk_size=500)
        results["enqueue_many"] = _rate(rows, time.perf_counter() - started)

    _spark_write(spark, url, f"bench-warm-{stamp}", min(rows, 20_000), 2)
    for partitions in (2, 4):
        started = time.perf_counter()
        _spark_write(spark, url, f"bench-w{partitions}-{stamp}", rows, partitions)
        results[f"spark_write_{partitions}p"] = _rate(rows, time.perf_counter() - started)
    best = max(results["spark_write_2p"], results["spark_write_4p"], key=lambda r: r["rows_per_s"])
    results["spark_write"] = best

    read_queue = f"bench-read-{stamp}"
    _spark_write(spark, url, read_queue, read_rows, 2)
    reader = spark.read.format("conveyor").option("url", url).option("queue", read_queue)
    reader.load().limit(1000).write.format("noop").mode("overwrite").save()  # warm-up
    started = time.perf_counter()
    reader.load().write.format("noop").mode("overwrite").save()
    results["spark_read"] = _rate(read_rows, time.perf_counter() - started)

    client = redis.Redis.from_url(url)
    events = int(client.xlen(f"conveyor:{{{read_queue}}}:events"))
    client.close()
    started = time.perf_counter()
    (
        spark.read.format("conveyor_events")
        .option("url", url)
        .option("queue", read_queue)
        .load()
        .write.format("noop")
        .mode("overwrite")
        .save()
    )
    results["spark_events"] = _rate(events, time.perf_counter() - started)
    results["targets"] = {
        name: {"target": target, "met": results[name]["rows_per_s"] >= target}
        for name, target in TARGETS.items()
    }
    results["targets"]["spark_write_vs_enqueue_many"] = {
        "met": results["spark_write"]["rows_per_s"] >= results["enqueue_many"]["rows_per_s"]
    }
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Spark throughput benchmark for Conveyor")
    parser.add_argument("--url", help="Redis URL (default: a private redis-server)")
    parser.add_argument("--rows", type=int, default=100_000, help="rows to enqueue")
    parser.add_argument("--read", type=int, default=1_000_000, help="jobs to read back")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)
    from .session import build_session

    with ExitStack() as stack:
        url = args.url
        if url is None:
            from conveyor.integrations.redis_server import RedisProcess

            data = stack.enter_context(tempfile.TemporaryDirectory(prefix="conveyor-bench-"))
            url = stack.enter_context(RedisProcess(data_dir=data, appendonly=False)).url
        spark = build_session(
            args.master, app_name="conveyor-bench", conf={"spark.ui.enabled": "false"}
        )
        stack.callback(spark.stop)
        spark.sparkContext.setLogLevel("ERROR")
        print(json.dumps(measure(spark, url, args.rows, args.read), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

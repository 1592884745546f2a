"""Spark throughput against Conveyor's own bulk enqueue (for `make bench`).

    python -m conveyor.integrations.spark.bench [--url URL] [--rows 100000] [--read 1000000]

Measures, on one Redis (a private one when no --url is given):

* `enqueue_many`: `Queue.enqueue_many` from one process with generated ids (its fastest
  path, `enqueue_new`: the baseline), and `enqueue_many_given_ids` with ids chosen by the
  caller (the `enqueue` path: for comparison only);
* `spark_write`: `df.write.format("conveyor")` of the same jobs (the same data, default
  options; ids `<writeId>-<partition>-<row>`, `ifExists=skip`, so `enqueue_skip`), the best
  of 1, 2 and 4 partitions, after a warm-up write (JVM start-up and Python worker start are
  not counted, Spark's planning and commit of each query are); `spark_write_orders`: the
  pipeline's orders (an `id` column, payload and option columns), best of 1 and 2, for
  information: larger records, about 1.5 µs more of Redis time per job;
* `spark_read`: `spark.read.format("conveyor")` of `--read` jobs into Spark's `noop` sink
  (every row materialised, nothing collected);
* `spark_events`: `spark.read.format("conveyor_events")` of every event of those jobs;
* `apply`: `conveyor.spark.apply` over `--apply` rows run by two worker processes, against
  the same done by hand (`manual`: a write, a wait on the events stream until every job has
  finished, a read of the jobs joined to the rows).

Prints one JSON object: rows, seconds and rows/s per measure (and for the enqueues, on the
private server, its CPU time per row), and the targets met:
the writer at least 0.8x `enqueue_many`, reading at least 150,000 rows/s, `apply` within 1.3x
of the manual way. The 1,000,000-row pipeline's own target (under 60 s on `local[2]`) is
`make demo DEMO_ARGS=--big`'s figure, or `python -m conveyor.integrations.spark.pipeline
--million`.
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

TARGETS = {"spark_read": 150_000, "spark_events": 60_000}  # rows/s
WRITE_VS_ENQUEUE_MANY = 0.8  # the writer's rows/s at least this share of enqueue_many's
APPLY_VS_MANUAL = 1.3  # apply's seconds at most this multiple of the manual way's


def _rate(rows: int, seconds: float) -> dict[str, Any]:
    return {"rows": rows, "seconds": round(seconds, 2), "rows_per_s": round(rows / seconds)}


def _cpu_seconds(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


class _Stopwatch:
    """Wall time and, on the bench's own redis-server (`pid`), that server's CPU time: the
    cost per row in Redis, which other load on the machine barely moves (wall time does)."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.cpu = _cpu_seconds(pid) if pid is not None else 0.0
        self.started = time.perf_counter()

    def rate(self, rows: int) -> dict[str, Any]:
        out = _rate(rows, time.perf_counter() - self.started)
        if self.pid is not None:
            cpu = _cpu_seconds(self.pid) - self.cpu
            out["redis_cpu_us_per_row"] = round(cpu / rows * 1e6, 2)
        return out


def _spark_write(
    spark: SparkSession, url: str, queue: str, rows: int, partitions: int, *, plain: bool = False
) -> None:
    """The pipeline's orders (an id column, payload and option columns), or with `plain` the
    jobs `enqueue_many` enqueues below (the same data, default options, generated ids)."""
    from .pipeline import orders

    if plain:
        df = spark.range(rows, numPartitions=partitions).selectExpr(
            "id % 50000 AS customer", "id * 0.5 AS amount"
        )
    else:
        df = orders(spark, rows, tag=queue, partitions=partitions)
    (
        df.write.format("conveyor")
        .option("url", url)
        .option("queue", queue)
        .option("task", "bench")
        .option("eventsMaxlen", str(10 * rows + 10_000))
        .mode("append")
        .save()
    )


def measure(
    spark: SparkSession,
    url: str,
    rows: int,
    read_rows: int,
    apply_rows: int = 0,
    redis_pid: int | None = None,
) -> dict[str, Any]:
    import redis

    from conveyor.client.models import JobRequest, QueueSettings
    from conveyor.client.sync import Queue

    from . import register

    register(spark)
    settings = QueueSettings(events_maxlen=10 * max(rows, read_rows) + 10_000)
    results: dict[str, Any] = {}
    stamp = time.strftime("%H%M%S")

    for name, given in (("enqueue_many", False), ("enqueue_many_given_ids", True)):
        with Queue(f"bench-{name}-{stamp}".replace("_", "-"), url=url, settings=settings) as q:
            requests = [
                JobRequest("bench", {"customer": n % 50_000, "amount": n * 0.5},
                           {"id": f"b{n}"} if given else {})
                for n in range(rows)
            ]  # fmt: skip
            watch = _Stopwatch(redis_pid)
            q.enqueue_many(requests, chunk_size=500)
            results[name] = watch.rate(rows)

    _spark_write(spark, url, f"bench-warm-{stamp}", min(rows, 20_000), 2)
    for name, plain, counts in (("spark_write", True, (1, 2, 4)),
                                ("spark_write_orders", False, (1, 2))):  # fmt: skip
        writes = []
        for partitions in counts:
            queue_name = f"bench-{name}-{partitions}-{stamp}".replace("_", "-")
            watch = _Stopwatch(redis_pid)
            _spark_write(spark, url, queue_name, rows, partitions, plain=plain)
            writes.append(watch.rate(rows))
            results[f"{name}_{partitions}p"] = writes[-1]
        results[name] = max(writes, key=lambda r: r["rows_per_s"])

    read_queue = f"bench-read-{stamp}"
    _spark_write(spark, url, read_queue, read_rows, 2)
    reader = spark.read.format("conveyor").option("url", url).option("queue", read_queue)
    reader.load().limit(1000).write.format("noop").mode("overwrite").save()  # warm-up
    started = time.perf_counter()
    reader.load().write.format("noop").mode("overwrite").save()
    results["spark_read"] = _rate(read_rows, time.perf_counter() - started)

    client = redis.Redis.from_url(url)
    events = _job_events(client, f"conveyor:{{{read_queue}}}:events")
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
    ratio = results["spark_write"]["rows_per_s"] / results["enqueue_many"]["rows_per_s"]
    results["targets"]["spark_write_vs_enqueue_many"] = {
        "ratio": round(ratio, 2), "target": WRITE_VS_ENQUEUE_MANY,
        "met": ratio >= WRITE_VS_ENQUEUE_MANY,
    }  # fmt: skip
    if apply_rows:
        results |= _apply_against_manual(spark, url, apply_rows, stamp)
        ratio = results["apply"]["seconds"] / results["manual"]["seconds"]
        results["targets"]["apply_vs_manual"] = {
            "ratio": round(ratio, 2), "target": APPLY_VS_MANUAL, "met": ratio <= APPLY_VS_MANUAL,
        }  # fmt: skip
    return results


def _job_events(client: Any, key: str) -> int:
    """The rows a read of the stream gives: one per job an entry names, one for an entry
    naming none (protocol §11). Its `XLEN` counts entries, which since one entry per call
    are a 500th of the rows here."""
    from conveyor.protocol.events import entry_job_ids

    rows, low = 0, "-"
    while entries := client.xrange(key, low, "+", count=10_000):
        rows += sum(max(1, len(entry_job_ids(fields))) for _, fields in entries)
        low = "(" + entries[-1][0].decode()
    return rows


def _bench_tasks(queue: str) -> Any:
    from conveyor.client.tasks import Tasks

    tasks = Tasks(queue)

    @tasks.task(name="double")
    async def double(data: dict[str, int]) -> int:
        return data["n"] * 2

    return tasks


def _worker_main(url: str, queue: str) -> None:
    from conveyor.worker import Worker, WorkerSettings

    Worker(_bench_tasks(queue), url=url, settings=WorkerSettings(concurrency=100)).run_sync()


def _apply_against_manual(spark: SparkSession, url: str, rows: int, stamp: str) -> dict[str, Any]:
    """`apply` and the same by hand, each on a queue of its own drained by two workers."""
    import multiprocessing

    from conveyor.client.models import QueueSettings

    from .options import Target
    from .roundtrip import _register_reader, _wait, apply

    out: dict[str, Any] = {}
    df = spark.range(rows, numPartitions=2).selectExpr("id AS n").cache()
    df.count()
    for name in ("manual", "apply"):
        queue = f"bench-{name}-{stamp}"
        context = multiprocessing.get_context("spawn")
        workers = [context.Process(target=_worker_main, args=(url, queue), daemon=True)
                   for _ in range(2)]  # fmt: skip
        for worker in workers:
            worker.start()
        try:
            started = time.perf_counter()
            if name == "apply":
                done = apply(df, queue=queue, task="double", url=url).count()
            else:
                target = Target(url, queue, "conveyor", QueueSettings().events_maxlen)
                client = target.client()
                position = _register_reader(client, target, "bench")
                jobs = df.selectExpr("concat('m', n) AS id", "n")
                (jobs.write.format("conveyor").option("url", url).option("queue", queue)
                     .option("task", "double").mode("append").save())  # fmt: skip
                _wait(client, target, "bench", position, {f"m{n}" for n in range(rows)}, None)
                client.close()
                read = spark.read.format("conveyor").option("url", url).option("queue", queue)
                done = jobs.join(read.load().select("id", "result"), "id").count()
            out[name] = _rate(done, time.perf_counter() - started)
        finally:
            for worker in workers:
                worker.terminate()
                worker.join(10)
    df.unpersist()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Spark throughput benchmark for Conveyor")
    parser.add_argument("--url", help="Redis URL (default: a private redis-server)")
    parser.add_argument("--rows", type=int, default=100_000, help="rows to enqueue")
    parser.add_argument("--read", type=int, default=1_000_000, help="jobs to read back")
    parser.add_argument("--apply", type=int, default=100_000, help="rows through apply")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)
    from .session import build_session

    with ExitStack() as stack:
        url, pid = args.url, None
        if url is None:
            from conveyor.integrations.redis_server import RedisProcess

            data = stack.enter_context(tempfile.TemporaryDirectory(prefix="conveyor-bench-"))
            server = stack.enter_context(RedisProcess(data_dir=data, appendonly=False))
            url, pid = server.url, server.pid
        spark = build_session(
            args.master, app_name="conveyor-bench", conf={"spark.ui.enabled": "false"}
        )
        stack.callback(spark.stop)
        spark.sparkContext.setLogLevel("ERROR")
        results = measure(spark, url, args.rows, args.read, args.apply, redis_pid=pid)
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

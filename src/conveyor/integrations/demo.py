"""`make demo`: an embedded Redis, 10,000 jobs, workers with a progress bar,
and a summary — then, when PySpark is installed, the Spark pipeline and a DataFrame
through the queue and back (`conveyor.spark.apply`, rate-limited)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import Any

from conveyor.client.models import JobRequest
from conveyor.client.sync import Queue
from conveyor.integrations.embedded import EmbeddedRedis
from conveyor.integrations.progress import ProgressBar, follow

RESULT_TTL = 3600.0  # demo records expire after an hour
CORE_CONCURRENCY = 50  # the core part's workers, unless --concurrency says otherwise


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="conveyor-demo", description=__doc__)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=1, help="worker processes")
    parser.add_argument(
        "--concurrency", type=int, default=None,
        help=f"slots per worker (default {CORE_CONCURRENCY}; the Spark pipeline's own default)",
    )  # fmt: skip
    parser.add_argument("--url", default=os.environ.get("CONVEYOR_REDIS_URL"))
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark pipeline")
    parser.add_argument("--spark-rows", type=int, default=100_000)
    parser.add_argument("--big", action="store_true", help="Spark pipeline with 1,000,000 rows")
    parser.add_argument("--master", default=None, help="Spark master (default local[*])")
    args = parser.parse_args(argv)
    if args.concurrency is not None and args.concurrency < 1:
        parser.error(f"--concurrency must be at least 1, got {args.concurrency}")
    return args


def slots(args: argparse.Namespace, default: int) -> int:
    """A part's worker concurrency: `--concurrency` when given, else the part's own."""
    return default if args.concurrency is None else int(args.concurrency)


def jobs(count: int) -> list[JobRequest]:
    """Mostly thumbnails; every 10th a checksum (1 in 50 flaky); 1 in 500 corrupt."""
    made = []
    for i in range(count):
        data: dict[str, Any] = {"image": f"img-{i:06d}.jpg"}
        if i % 500 == 499:
            made.append(JobRequest("corrupt", data, {"result_ttl": RESULT_TTL}))
        elif i % 10 == 9:
            data["flaky"] = i % 50 == 49
            made.append(JobRequest("checksum", data, {"result_ttl": RESULT_TTL}))
        else:
            made.append(JobRequest("thumbnail", data, {"result_ttl": RESULT_TTL}))
    return made


def start_workers(
    url: str, queue: str, count: int, concurrency: int
) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "CONVEYOR_DEMO_QUEUE": queue}
    command = [
        sys.executable, "-m", "conveyor.integrations.cli", "worker",
        "conveyor.integrations.demo_tasks:tasks", "--url", url,
        "--concurrency", str(concurrency), "--burst",
        "--log-level", "error",  # the planned failures are counted below, not each printed
    ]  # fmt: skip
    return [subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL) for _ in range(count)]


def summary(queue: Queue, enqueue_s: float, total: int, run_s: float) -> str:
    counts = {state.value: n for state, n in queue.counts().items() if n}
    sample = [queue.get(job_id) for job_id in queue.job_ids("failed", limit=1)]
    reason = (sample[0].error or "").splitlines()[0] if sample and sample[0] else "none"
    return "\n".join(
        [
            f"enqueued  {total:,} jobs in {enqueue_s:.2f} s "
            f"({total / enqueue_s:,.0f} jobs/s, pipelined)",
            f"processed {total:,} jobs in {run_s:.2f} s ({total / run_s:,.0f} jobs/s end to end)",
            f"states    {counts}",
            f"failures  {counts.get('failed', 0)} (for example: {reason})",
        ]
    )


def run_core(url: str, args: argparse.Namespace) -> None:
    name = "demo-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    with Queue(name, url=url) as queue:
        print(f"queue {name!r} on {url}")
        started = time.monotonic()
        queue.enqueue_many(jobs(args.jobs), chunk_size=1000)
        enqueue_s = time.monotonic() - started
        print(
            f"enqueued {args.jobs:,} jobs in {enqueue_s:.2f} s; starting {args.workers} worker(s)"
        )
        started = time.monotonic()
        workers = start_workers(url, name, args.workers, slots(args, CORE_CONCURRENCY))
        follow(queue, ProgressBar(args.jobs), alive=lambda: any(w.poll() is None for w in workers))
        run_s = time.monotonic() - started
        for worker in workers:
            worker.wait(60)
        print(summary(queue, enqueue_s, args.jobs, run_s))


def run_spark(url: str, args: argparse.Namespace) -> None:
    """Spark enqueues a generated DataFrame, workers drain it, Spark archives
    the jobs and writes the report (conveyor.integrations.spark.pipeline)."""
    try:
        import pyspark  # noqa: F401  (only to see whether the extra is installed)
    except ImportError:
        print("skipping the Spark pipeline: pip install 'conveyor[spark]' to see it")
        return
    from conveyor.integrations.spark.pipeline import WORKER_CONCURRENCY, run_pipeline
    from conveyor.integrations.spark.session import SparkSetupError, build_session

    try:
        spark = build_session(args.master, app_name="conveyor-demo")
    except SparkSetupError as exc:
        print(f"skipping the Spark pipeline: {exc}")
        return
    try:
        rows = 1_000_000 if args.big else args.spark_rows
        result = run_pipeline(
            spark, url, rows, workers=max(2, args.workers),
            concurrency=slots(args, WORKER_CONCURRENCY),
        )  # fmt: skip
        print(f"the pipeline's report: {result.report_html} (summary: {result.report_json})")
        from conveyor.integrations.spark.apply_demo import run_apply_demo

        run_apply_demo(spark, url, args.spark_rows, workers=max(2, args.workers))
    finally:
        spark.stop()


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    with ExitStack() as stack:
        url = args.url or stack.enter_context(EmbeddedRedis()).url
        run_core(url, args)
        if not args.no_spark:
            run_spark(url, args)


if __name__ == "__main__":
    main()

"""Run and wait quantiles that could have happened: never above the largest
duration a worker measured (kept per hour), on buckets fine enough that a
quantile is not a bucket's far bound."""

from __future__ import annotations

import asyncio
from typing import Any

import redis

from conveyor.client.tasks import Tasks
from conveyor.metrics import BOUNDS, Histogram
from conveyor.protocol import observe
from conveyor.protocol.keys import QueueKeys
from support.workers import WorkerRunner, wait_until

QUANTILES = (0.5, 0.75, 0.9, 0.95, 0.99, 1.0)


def test_no_quantile_above_the_longest_run_or_wait(
    redis_url: str, queue_name: str, queue: Any, worker_runner: WorkerRunner
) -> None:
    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task
    async def nap(data: float) -> None:
        await asyncio.sleep(data)

    ids = [tasks.queue().enqueue("nap", 0.052).id for _ in range(12)]
    handle = worker_runner.start(tasks, lease=1.5, concurrency=4)

    def counted() -> bool:
        timings = {t.task: t for t in queue.task_timings()}
        return "nap" in timings and timings["nap"].run.count == 12

    wait_until(counted, timeout=30)
    handle.stop()
    jobs = [queue.get(job_id) for job_id in ids]
    # the record's times bound the worker's: it measures the handler within its lease
    longest_run = max((j.finished_at - j.started_at).total_seconds() for j in jobs) + 0.002
    longest_wait = max((j.started_at - j.created_at).total_seconds() for j in jobs) + 0.002
    seen = {t.task: t for t in queue.task_timings()}["nap"]
    for q in QUANTILES:
        assert seen.run.quantile(q) <= longest_run, (q, seen.run.quantile(q), longest_run)
        assert seen.wait.quantile(q) <= longest_wait, (q, seen.wait.quantile(q), longest_wait)
    assert seen.run.max is not None and 0.05 <= seen.run.max <= longest_run


def test_the_hour_keeps_the_largest_of_every_flush(
    redis_client: redis.Redis, queue_name: str, sync_queue: Any
) -> None:
    keys = QueueKeys("conveyor", queue_name)
    runner = sync_queue.runner
    for largest in (40_000, 90_000, 70_000):  # µs, three flushes of one worker or three
        runner.run(
            observe.record_metrics(
                keys, completed=1, failed=0, retried=0, stalled=0, retention_ms=60_000,
                timings={"R21:t": 1, "Rs:t": largest, "max/R:t": largest},
            )
        )  # fmt: skip
    (timings,) = sync_queue.task_timings()
    assert timings.run.max == 0.09 and timings.run.count == 3
    assert timings.run.quantile(1.0) == 0.09
    hours = [k for k in redis_client.scan_iter(match=keys.base + "tmax:*")]
    assert len(hours) == 1 and 0 < redis_client.pttl(hours[0]) <= 60_000


def test_a_quantile_is_capped_by_the_largest_and_the_buckets_are_fine() -> None:
    bounds = (1.0, 2.0, 4.0)
    assert Histogram(bounds, (0, 0, 10, 0), 30.0, max=2.5).quantile(0.99) == 2.5
    assert Histogram(bounds, (0, 0, 10, 0), 30.0, max=3.9).quantile(0.5) == 3.0
    assert Histogram(bounds, (0, 0, 0, 3), 30.0, max=7.0).quantile(0.9) == 7.0  # above every bound
    assert Histogram(bounds, (0, 0, 0, 3), 30.0).quantile(0.9) == 4.0  # no max known
    # neighbouring bounds are at most 1.5 apart (a factor) up to an hour
    upto_hour = [b for b in BOUNDS if b <= 3600]
    assert all(b / a <= 1.5 + 1e-9 for a, b in zip(upto_hour, upto_hour[1:], strict=False))
    assert BOUNDS[-1] >= 86400

"""Suspects (jobs whose last worker died with them) on a real worker: each runs in a child
process of its own, up to `suspects` at once, while the worker's other slots keep running
jobs."""

from __future__ import annotations

import logging
import os
import time

import pytest
import redis

from conveyor import JobState, Queue
from conveyor.client.tasks import Tasks
from support import process_app
from support.workers import WorkerRunner, wait_until


@pytest.fixture
def tasks(redis_url: str, queue_name: str) -> Tasks:
    tasks = Tasks(queue_name, url=redis_url)
    tasks.handlers.update(process_app.tasks.handlers)
    return tasks


def _suspect(queue: Queue, client: redis.Redis, seconds: float) -> str:
    job_id = queue.enqueue("nap", seconds).id
    client.hset(queue.core.keys.job(job_id), "stalls", 1)  # as a reap leaves it
    return job_id


def test_a_suspect_runs_in_a_child_while_other_jobs_run_beside_it(
    tasks: Tasks,
    sync_queue: Queue,
    redis_client: redis.Redis,
    worker_runner: WorkerRunner,
    caplog: pytest.LogCaptureFixture,
) -> None:
    suspect = _suspect(sync_queue, redis_client, 3.0)
    others = [sync_queue.enqueue("nap", 0.01).id for _ in range(20)]
    with caplog.at_level(logging.WARNING, logger="conveyor.worker"):
        worker_runner.start(tasks, concurrency=4, lease=1.5)  # the roll call every 0.5 s
        for job_id in others:  # long before the suspect ends
            sync_queue.wait_result(job_id, timeout=30)
        assert sync_queue.get(suspect).state is JobState.ACTIVE
        workers = wait_until(lambda: [w for w in sync_queue.workers() if w.info.get("suspects")])
        assert workers[0].info["suspects"] == [suspect]  # the roll call shows it
        result = sync_queue.wait_result(suspect, timeout=30)
    assert result["pid"] != os.getpid()  # not on the worker's loop: in a child
    assert all(sync_queue.wait_result(i, timeout=5)["pid"] == os.getpid() for i in others[:3])
    starts = [r for r in caplog.records if "is a suspect" in r.getMessage()]
    assert [r.levelno for r in starts] == [logging.WARNING]
    assert suspect in starts[0].getMessage()


def test_a_killed_worker_s_jobs_re_run_at_once_each_in_a_child_of_its_own(
    tasks: Tasks, sync_queue: Queue, redis_client: redis.Redis, worker_runner: WorkerRunner
) -> None:
    """The jobs a dead worker held come back together: a crash costs one slot per job,
    not a queue of re-runs one after another."""
    run_s = 2.0
    suspects = [_suspect(sync_queue, redis_client, run_s) for _ in range(4)]
    began = time.monotonic()
    worker_runner.start(tasks, concurrency=8)  # suspects=4, the default
    results = [sync_queue.wait_result(i, timeout=60) for i in suspects]
    took = time.monotonic() - began
    assert len({r["pid"] for r in results}) == 4  # a child each
    assert os.getpid() not in {r["pid"] for r in results}
    latest_start = max(r["started"] for r in results)
    assert all(latest_start < r["ended"] for r in results)  # all four ran at the same time
    assert took < 3 * run_s, took  # one after another: 4 x run_s at least


def test_suspects_beyond_the_limit_wait_each_soon_after_the_one_before(
    tasks: Tasks, sync_queue: Queue, redis_client: redis.Redis, worker_runner: WorkerRunner
) -> None:
    run_s = 0.3
    suspects = [_suspect(sync_queue, redis_client, run_s) for _ in range(5)]
    began = time.monotonic()
    worker_runner.start(tasks, concurrency=8, suspects=1)
    results = [sync_queue.wait_result(i, timeout=60) for i in suspects]
    runs = sorted((r["started"], r["ended"]) for r in results)
    took = time.monotonic() - began
    pairs = list(zip(runs, runs[1:], strict=False))
    assert all(after[0] >= before[1] for before, after in pairs)  # one at a time
    gaps = [after[0] - before[1] for before, after in pairs]
    # each starts when the one before has ended, not after idle_wait (30 s here) or a poll
    assert max(gaps) < 10 * run_s, gaps
    assert took < len(suspects) * run_s * 10, took

"""Batch tasks: one handler call per list of jobs, each job acknowledged,
retried and failed on its own."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from conveyor import JobState, Queue
from conveyor.client.tasks import Tasks
from conveyor.errors import ConfigurationError, JobFailedError
from support.workers import WorkerRunner


@pytest.fixture
def tasks(redis_url: str, queue_name: str) -> Tasks:
    return Tasks(queue_name, url=redis_url)


def test_jobs_come_in_batches_and_each_has_its_own_outcome(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    calls: list[list[int]] = []
    lock = threading.Lock()

    @tasks.task(batch_size=5, batch_timeout=0.5, max_failures=2, min_backoff=0, max_backoff=0)
    def double(numbers: list[int]) -> list[Any]:
        with lock:
            calls.append(list(numbers))
        flaky = len([c for c in calls if 7 in c]) == 1
        return [ValueError("seven, the first time") if n == 7 and flaky else n * 2 for n in numbers]

    @tasks.task(batch_size=3, batch_timeout=0.2, max_failures=5)
    async def broken(items: list[int]) -> list[int]:
        await asyncio.sleep(0)
        raise RuntimeError("the whole call failed")

    jobs = [double.enqueue(n) for n in range(12)]
    doomed = [broken.enqueue(n, max_failures=1) for n in range(2)]
    worker_runner.start(tasks, concurrency=20)
    assert [sync_queue.wait_result(j.id, timeout=30) for j in jobs] == [n * 2 for n in range(12)]
    assert sorted(n for call in calls for n in call) == sorted([*range(12), 7])  # 7 twice
    assert max(len(c) for c in calls) == 5 and all(len(c) <= 5 for c in calls)
    seven = sync_queue.get(jobs[7].id)
    assert seven is not None and (seven.failures, seven.attempts) == (1, 2)
    assert "ValueError: seven, the first time" in (seven.error or "")
    others = [sync_queue.get(j.id) for n, j in enumerate(jobs) if n != 7]
    assert all(r is not None and r.failures == 0 for r in others)
    for job in doomed:
        with pytest.raises(JobFailedError, match="RuntimeError: the whole call failed"):
            sync_queue.wait_result(job.id, timeout=30)
        record = sync_queue.get(job.id)
        assert record is not None and record.state is JobState.FAILED


def test_a_batch_that_does_not_fill_runs_after_batch_timeout_and_a_wrong_reply_fails_it(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    sizes: list[int] = []

    @tasks.task(batch_size=100, batch_timeout=0.3, max_failures=1)
    def short_reply(items: list[int]) -> list[int]:
        sizes.append(len(items))
        return items[:1]  # one entry, whatever the batch

    jobs = [short_reply.enqueue(n) for n in range(3)]
    worker_runner.start(tasks)
    for job in jobs:
        with pytest.raises(JobFailedError, match="must return a list of 3 entries"):
            sync_queue.wait_result(job.id, timeout=30)
    assert sizes == [3]


def test_bad_batch_options_are_refused(tasks: Tasks) -> None:
    with pytest.raises(ConfigurationError):
        tasks.task(batch_size=0)(lambda items: items)
    with pytest.raises(ConfigurationError):
        tasks.task(batch_size=2, executor="process")(lambda items: items)
    with pytest.raises(ConfigurationError):
        tasks.task(batch_size=2, batch_timeout=0)(lambda items: items)

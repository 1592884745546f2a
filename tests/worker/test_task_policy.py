"""A task's options apply where its jobs run (issue 18): a job enqueued by
name, not through `task.enqueue`, still gets the task's retry and timeout
policy; options the job carries win."""

from __future__ import annotations

import asyncio

from conveyor import JobState, Queue, Tasks
from support.workers import WorkerRunner, wait_until


def test_a_job_enqueued_by_name_gets_the_task_retry_policy(
    redis_url: str, queue_name: str, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task(max_failures=1)
    async def explode(data: None) -> None:
        raise RuntimeError("boom")

    job = sync_queue.enqueue("explode")  # by name: it carries no max_failures
    worker_runner.start(tasks)
    found = wait_until(
        lambda: (j := sync_queue.get(job.id)) is not None and j.failures >= 1 and j, timeout=30
    )
    assert found.state is JobState.FAILED  # the protocol default (3) would retry it
    assert found.attempts == 1


def test_options_the_job_carries_win_over_the_task(
    redis_url: str, queue_name: str, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task(max_failures=1)
    async def explode(data: None) -> None:
        raise RuntimeError("boom")

    job = sync_queue.enqueue("explode", max_failures=2, min_backoff=60)
    worker_runner.start(tasks)
    found = wait_until(
        lambda: (j := sync_queue.get(job.id)) is not None and j.failures >= 1 and j, timeout=30
    )
    assert found.state is JobState.DELAYED  # retried: the job's own max_failures


def test_a_job_enqueued_by_name_gets_the_task_timeout(
    redis_url: str, queue_name: str, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task(timeout=0.5, max_failures=1)
    async def slow(data: None) -> None:
        await asyncio.sleep(60)  # the protocol default timeout is 300 s

    job = sync_queue.enqueue("slow")
    worker_runner.start(tasks)
    found = wait_until(
        lambda: (j := sync_queue.get(job.id)) is not None and j.state is JobState.FAILED and j,
        timeout=30,
    )
    assert "timed out" in (found.error or "")

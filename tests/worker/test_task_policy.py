"""A task's options apply where its jobs run (issue 18): a job enqueued by
name, not through `task.enqueue`, still gets the task's retry and timeout
policy; options the job carries win."""

from __future__ import annotations

import asyncio

import redis

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


def _policy_writes(redis_url: str) -> int:
    """HSETNX calls so far: only policy.lua sends them."""
    stats = redis.Redis.from_url(redis_url).info("commandstats")
    return int(stats.get("cmdstat_hsetnx", {}).get("calls", 0))


def test_a_job_carrying_its_task_options_costs_no_policy_call(
    redis_url: str, queue_name: str, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task(max_failures=1, timeout=5)
    async def quick(data: None) -> None:
        return None

    worker_runner.start(tasks)
    _run(sync_queue, quick.enqueue(None).id)  # the worker's own start-up writes are done
    before = _policy_writes(redis_url)
    for _ in range(20):  # each carries max_failures=1 and timeout=5: nothing to fill in
        _run(sync_queue, quick.enqueue(None).id)
    # a policy call per job would be 40 writes; a client's first version check (HSETNX
    # meta version) may fall in the window, nothing more
    assert _policy_writes(redis_url) - before <= 2
    before = _policy_writes(redis_url)
    _run(sync_queue, sync_queue.enqueue("quick").id)  # carries nothing: both options written
    assert _policy_writes(redis_url) >= before + 2


def test_a_result_ttl_is_always_applied_by_a_policy_call(
    redis_url: str, queue_name: str, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task(result_ttl=3600)
    async def kept(data: None) -> None:
        return None

    worker_runner.start(tasks)
    _run(sync_queue, kept.enqueue(None).id)
    before = _policy_writes(redis_url)
    _run(sync_queue, kept.enqueue(None).id)  # the claim reply does not say its result_ttl
    assert _policy_writes(redis_url) >= before + 1


def _run(queue: Queue, job_id: str) -> None:
    wait_until(lambda: (j := queue.get(job_id)) is not None and j.state is JobState.COMPLETED,
               timeout=30)  # fmt: skip

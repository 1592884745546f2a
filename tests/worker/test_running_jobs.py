"""The worker runs sync and async handlers, stores results, retries and fails."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from conveyor import JobState, PermanentError, Queue
from conveyor.client.tasks import Tasks
from conveyor.errors import JobFailedError
from conveyor.worker import current_job
from support.workers import WorkerRunner, wait_until


@pytest.fixture
def tasks(redis_url: str, queue_name: str) -> Tasks:
    return Tasks(queue_name, url=redis_url)


def test_async_and_sync_handlers_complete_with_results(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    @tasks.task
    async def add(data: dict[str, int]) -> int:
        return data["a"] + data["b"]

    @tasks.task
    def shout(data: str) -> str:
        assert threading.current_thread() is not threading.main_thread()
        return data.upper()

    one = add.enqueue({"a": 2, "b": 3})
    two = shout.enqueue("hi")
    worker_runner.start(tasks)
    assert sync_queue.wait_result(one.id, timeout=10) == 5
    assert sync_queue.wait_result(two.id, timeout=10) == "HI"
    job = sync_queue.get(one.id)
    assert job.state is JobState.COMPLETED
    assert (job.attempts, job.failures, job.result) == (1, 0, 5)
    assert job.started_at is not None and job.finished_at >= job.started_at
    assert job.worker == worker_runner.running[0].worker.id


def test_current_job_and_progress_in_both_kinds_of_handler(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    seen: dict[str, Any] = {}

    @tasks.task
    async def a(data: None) -> None:
        job = current_job()
        seen["a"] = (job.id, job.attempt, job.task)
        job.progress(0.25)

    @tasks.task
    def s(data: None) -> None:
        job = current_job()
        seen["s"] = (job.id, job.attempt, job.task)
        job.progress(3, 4)

    ja, js = a.enqueue(None), s.enqueue(None)
    worker_runner.start(tasks)
    sync_queue.wait_result(ja.id, timeout=10)
    sync_queue.wait_result(js.id, timeout=10)
    assert seen == {"a": (ja.id, 1, "a"), "s": (js.id, 1, "s")}
    assert sync_queue.get(ja.id).progress == 0.25
    assert sync_queue.get(js.id).progress == 0.75
    progress = [e for e in sync_queue.events(after="0-0") if e.name == "progress"]
    assert {(e.job_id, e.fields["progress"]) for e in progress} == {
        (ja.id, "0.25"),
        (js.id, "0.75"),
    }


def test_failures_are_retried_with_backoff_then_succeed(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    runs: list[float] = []

    @tasks.task(max_failures=5, min_backoff=0.2, max_backoff=0.4)
    def flaky(data: None) -> str:
        runs.append(time.monotonic())
        if len(runs) < 3:
            raise RuntimeError(f"try {len(runs)}")
        return "ok"

    done = flaky.enqueue(None)
    worker_runner.start(tasks)
    assert sync_queue.wait_result(done.id, timeout=10) == "ok"
    job = sync_queue.get(done.id)
    assert (job.attempts, job.failures) == (3, 2)
    assert "RuntimeError: try 2" in job.error
    gaps = [b - a for a, b in zip(runs, runs[1:], strict=False)]
    assert 0.1 <= gaps[0] <= 1.0 and 0.2 <= gaps[1] <= 1.0  # equal jitter: [min/2.., max]
    names = [e.name for e in sync_queue.events(after="0-0") if e.job_id == done.id]
    assert names.count("retried") == 2 and names[-1] == "completed"


def test_a_job_fails_for_good_after_max_failures(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    @tasks.task(max_failures=2, min_backoff=0, max_backoff=0)
    async def broken(data: None) -> None:
        raise ValueError("nope")

    done = broken.enqueue(None)
    worker_runner.start(tasks)
    with pytest.raises(JobFailedError) as raised:
        sync_queue.wait_result(done.id, timeout=10)
    assert "ValueError: nope" in raised.value.error
    job = sync_queue.get(done.id)
    assert (job.state, job.attempts, job.failures) == (JobState.FAILED, 2, 2)
    assert sync_queue.counts()[JobState.FAILED] == 1


def test_permanent_error_is_never_retried(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    @tasks.task(max_failures=10)
    def refuse(data: None) -> None:
        raise PermanentError("bad input")

    done = refuse.enqueue(None)
    worker_runner.start(tasks)
    with pytest.raises(JobFailedError, match="PermanentError: bad input"):
        sync_queue.wait_result(done.id, timeout=10)
    assert sync_queue.get(done.id).attempts == 1


class RetryLater(Exception):
    def __init__(self, at: float) -> None:
        super().__init__("later")
        self.retry_at = at


def test_retry_at_overrides_the_backoff(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    runs: list[float] = []

    @tasks.task(min_backoff=100, max_backoff=100)
    def later(data: None) -> str:
        runs.append(time.time())
        if len(runs) == 1:
            raise RetryLater(time.time() + 0.5)
        return "ran"

    done = later.enqueue(None)
    worker_runner.start(tasks)
    assert sync_queue.wait_result(done.id, timeout=10) == "ran"
    assert 0.4 <= runs[1] - runs[0] < 3  # not the 100 s backoff


def test_a_handler_past_its_timeout_is_stopped_and_retried(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    attempts: list[int] = []

    @tasks.task(timeout=0.2, min_backoff=0, max_backoff=0)
    async def slow(data: None) -> str:
        attempts.append(current_job().attempt)
        if len(attempts) == 1:
            await asyncio.sleep(30)
        return "second"

    done = slow.enqueue(None)
    worker_runner.start(tasks)
    assert sync_queue.wait_result(done.id, timeout=10) == "second"
    job = sync_queue.get(done.id)
    assert "JobTimeoutError: timed out after 0.2 s" in job.error
    assert attempts == [1, 2]


def test_unserialisable_result_fails_the_job_permanently(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    @tasks.task(max_failures=5)
    def weird(data: None) -> object:
        return object()

    done = weird.enqueue(None)
    worker_runner.start(tasks)
    with pytest.raises(JobFailedError, match="NotSerializableError"):
        sync_queue.wait_result(done.id, timeout=10)
    assert sync_queue.get(done.id).attempts == 1


def test_unknown_tasks_and_bad_data_fail_with_a_reason(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner, redis_client: Any
) -> None:
    @tasks.task
    def known(data: None) -> str:
        return "fine"

    ghost = sync_queue.enqueue("ghost", None)
    garbled = sync_queue.enqueue("known", None)
    redis_client.hset(sync_queue.core.keys.job(garbled.id), "data", b"\xff{not json")
    fine = sync_queue.enqueue("known", None)
    worker_runner.start(tasks)
    with pytest.raises(JobFailedError, match="UnknownTaskError"):
        sync_queue.wait_result(ghost.id, timeout=10)
    with pytest.raises(JobFailedError, match="UndecodableDataError"):
        sync_queue.wait_result(garbled.id, timeout=10)
    assert sync_queue.wait_result(fine.id, timeout=10) == "fine"


def test_priorities_run_highest_first_and_fifo_within(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    order: list[str] = []

    @tasks.task
    def record(data: str) -> None:
        order.append(data)

    for name, prio in [("n1", "normal"), ("l1", "low"), ("h1", "high"), ("n2", "normal")]:
        record.enqueue(name, priority=prio)
    record.enqueue("p5", priority=5)
    record.enqueue("h2", priority="high")
    worker_runner.start(tasks, concurrency=1)
    wait_until(lambda: len(order) == 6)
    assert order == ["h1", "h2", "p5", "n1", "n2", "l1"]

"""Batch tasks: one handler call per list of jobs, each job acknowledged,
retried and failed on its own."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Any

import pytest

from conveyor import JobState, Queue
from conveyor.client.models import QueueSettings
from conveyor.client.tasks import Tasks
from conveyor.errors import ConfigurationError, ConveyorError, JobFailedError
from conveyor.hooks import Hook, RunningJob
from conveyor.worker import current_job
from support.workers import WorkerRunner, wait_until


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


def test_current_job_in_a_batch_handler_raises_a_clear_error(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    """A call runs several jobs: there is no one current job (not the last
    job a runner ran, left current on the loop)."""
    seen: list[str] = []

    @tasks.task
    async def single(data: None) -> str:
        return current_job().id

    @tasks.task(batch_size=3, batch_timeout=0.2)
    def sync_rows(rows: list[int]) -> list[int]:
        try:
            current_job()
        except ConveyorError as exc:
            seen.append(str(exc))
        return rows

    @tasks.task(batch_size=3, batch_timeout=0.2)
    async def async_rows(rows: list[int]) -> list[int]:
        try:
            current_job()
        except ConveyorError as exc:
            seen.append(str(exc))
        return rows

    jobs = [single.enqueue(None) for _ in range(5)]
    jobs += [sync_rows.enqueue(n) for n in range(4)] + [async_rows.enqueue(n) for n in range(4)]
    worker_runner.start(tasks, concurrency=20)
    for job in jobs:
        sync_queue.wait_result(job.id, timeout=30)
    assert len(seen) >= 4  # two calls of each at least, every one refused
    assert all("batch handler" in text for text in seen)
    assert any("'sync_rows'" in text for text in seen)
    assert any("'async_rows'" in text for text in seen)


def test_a_worker_running_sync_handlers_in_processes_runs_batch_tasks_in_threads(
    tasks: Tasks,
    sync_queue: Queue,
    worker_runner: WorkerRunner,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """--executor process does not apply to batch tasks (a batch call is not
    one job a child can run and be killed for): they run in the worker's
    threads, and the worker says so at start."""
    caplog.set_level(logging.WARNING, logger="conveyor.worker")

    @tasks.task(batch_size=2, batch_timeout=0.2)
    def pids(rows: list[int]) -> list[int]:
        return [os.getpid()] * len(rows)

    jobs = [pids.enqueue(n) for n in range(3)]
    worker_runner.start(tasks, executor="process", processes=1)
    assert {sync_queue.wait_result(j.id, timeout=30) for j in jobs} == {os.getpid()}
    said = [r.getMessage() for r in caplog.records if "batch" in r.getMessage()]
    assert said and "'pids'" in said[0] and "threads" in said[0]


class Told(Hook):
    """What a batch task's jobs tell the hooks."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.lock = threading.Lock()

    def _add(self, *entry: Any) -> None:
        with self.lock:
            self.calls.append(entry)

    def before_run(self, job: RunningJob) -> None:
        self._add("before_run", job.data, job.waited is not None)

    def after_success(self, job: RunningJob, *, duration: float) -> None:
        self._add("after_success", job.data, duration > 0)

    def after_failure(
        self, job: RunningJob, exc: BaseException | None, *, error: str, duration: float
    ) -> None:
        self._add("after_failure", job.data, type(exc).__name__, duration > 0)

    def on_retry(self, job: RunningJob, *, error: str) -> None:
        self._add("on_retry", job.data, error.split("\n")[0])

    def on_final_failure(self, job: RunningJob, *, error: str) -> None:
        self._add("on_final_failure", job.data, error.split("\n")[0])


def test_a_batch_jobs_hooks_get_its_run_and_its_error(
    redis_url: str,
    queue_name: str,
    sync_queue: Queue,
    worker_runner: WorkerRunner,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="conveyor.jobs")
    told = Told()
    tasks = Tasks(queue_name, url=redis_url, settings=QueueSettings(hooks=(told,)))

    @tasks.task(batch_size=3, batch_timeout=0.3, max_failures=2, min_backoff=0, max_backoff=0)
    def picky(numbers: list[int]) -> list[Any]:
        return [ValueError(f"no {n}") if n > 0 else n for n in numbers]

    jobs = [picky.enqueue(n) for n in range(3)]
    worker_runner.start(tasks, concurrency=10)
    assert sync_queue.wait_result(jobs[0].id, timeout=30) == 0
    for job in jobs[1:]:
        with pytest.raises(JobFailedError):
            sync_queue.wait_result(job.id, timeout=30)
    wait_until(lambda: len([c for c in told.calls if c[0] == "on_final_failure"]) == 2, 30)

    with told.lock:
        calls = sorted(told.calls, key=repr)
    # every run told, with its wait on the first attempt and a run time
    assert sorted(c for c in calls if c[0] == "before_run") == sorted(
        [("before_run", n, True) for n in range(3)] + [("before_run", n, False) for n in (1, 2)]
    )
    assert [c for c in calls if c[0] == "after_success"] == [("after_success", 0, True)]
    assert sorted(c for c in calls if c[0] == "after_failure") == [
        ("after_failure", n, "ValueError", True) for n in (1, 1, 2, 2)
    ]
    # the job's own error, not an empty one
    written = ("on_final_failure", "on_retry")
    assert sorted(c for c in calls if c[0] in written) == [
        (what, n, f"ValueError: no {n}") for what in written for n in (1, 2)
    ]
    lines = [r.getMessage() for r in caplog.records if r.name == "conveyor.jobs"]
    assert sorted(line.split(": ", 1)[1].split("\n")[0] for line in lines) == [
        "ValueError: no 1", "ValueError: no 2",
    ]  # fmt: skip

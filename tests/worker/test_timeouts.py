"""Timeouts that stop the job, and no run recorded as finished while its code
still runs: a sync handler's thread keeps its slot until it returns (with a
cooperative `current_job().cancelled`), an async handler is cancelled, and
one that blocks the loop is named by the watchdog and fails alone."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest

from conveyor import JobState, Queue
from conveyor.client.tasks import Tasks
from conveyor.errors import JobFailedError
from conveyor.worker import current_job
from support.workers import WorkerRunner


@pytest.fixture
def tasks(redis_url: str, queue_name: str) -> Tasks:
    return Tasks(queue_name, url=redis_url)


def _failed_with(queue: Queue, job_id: str, text: str) -> None:
    with pytest.raises(JobFailedError) as failure:
        queue.wait_result(job_id, timeout=20)
    assert text in failure.value.error


def test_a_thread_past_its_timeout_keeps_its_slot_and_is_failed_only_when_it_returns(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    ended: dict[str, float] = {}
    started: dict[str, float] = {}

    @tasks.task(timeout=0.5, max_failures=1)
    def stubborn(data: None) -> None:
        started["stubborn"] = time.time()
        time.sleep(2.0)  # ignores the flag: a thread cannot be stopped
        ended["stubborn"] = time.time()

    @tasks.task
    def after(data: None) -> None:
        started["after"] = time.time()

    slow = stubborn.enqueue(None)
    behind = after.enqueue(None)
    worker_runner.start(tasks, concurrency=1)
    _failed_with(sync_queue, slow.id, "JobTimeoutError")
    sync_queue.wait_result(behind.id, timeout=20)
    job = sync_queue.get(slow.id)
    assert job is not None and job.finished_at is not None
    # the failure was written after the thread returned, and the one slot
    # stayed taken until then: the next job started after it
    assert job.finished_at.timestamp() >= ended["stubborn"] - 0.01
    assert started["after"] >= ended["stubborn"]


def test_a_thread_sees_cancelled_at_its_timeout_and_stops(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    seen: list[float] = []

    @tasks.task(timeout=0.5, max_failures=1)
    def cooperative(data: None) -> str:
        begin = time.monotonic()
        while time.monotonic() - begin < 20:
            if current_job().cancelled:
                seen.append(time.monotonic() - begin)
                return "stopped"
            time.sleep(0.01)
        return "ran on"

    job = cooperative.enqueue(None)
    worker_runner.start(tasks)
    _failed_with(sync_queue, job.id, "JobTimeoutError: timed out after 0.5 s")
    assert len(seen) == 1 and 0.45 < seen[0] < 10


def test_an_async_handler_is_cancelled_at_its_timeout(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    cancelled = threading.Event()

    @tasks.task(timeout=0.3, max_failures=1)
    async def sleeper(data: None) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    job = sleeper.enqueue(None)
    worker_runner.start(tasks)
    _failed_with(sync_queue, job.id, "JobTimeoutError")
    assert cancelled.is_set()


def test_a_handler_blocking_the_loop_is_named_fails_alone_and_spares_the_others(
    tasks: Tasks,
    sync_queue: Queue,
    worker_runner: WorkerRunner,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="conveyor.worker")
    waiting = threading.Event()

    @tasks.task(timeout=1.0, max_failures=1)
    async def patient(data: None) -> str:
        waiting.set()
        await asyncio.sleep(0.3)  # its own run takes 0.3 s of its 1 s
        return "done"

    @tasks.task(timeout=1.0, max_failures=1)
    async def hog(data: None) -> str:
        assert waiting.wait(10)
        await asyncio.sleep(0)
        time.sleep(2.5)  # blocks the loop, past both jobs' timeouts
        return "hogged"

    spared = patient.enqueue(None)
    blocker = hog.enqueue(None)
    worker_runner.start(tasks, concurrency=2)
    assert sync_queue.wait_result(spared.id, timeout=20) == "done"
    _failed_with(sync_queue, blocker.id, "while blocking the event loop")
    reports = [r.getMessage() for r in caplog.records if "event loop blocked" in r.getMessage()]
    assert reports, "the watchdog said nothing"
    assert f"task 'hog' (job {blocker.id})" in reports[0]
    assert "test_timeouts.py" in reports[0]
    record = sync_queue.get(spared.id)
    assert record is not None and record.state is JobState.COMPLETED and record.failures == 0


def test_an_async_handler_that_blocks_without_suspending_fails_with_a_timeout(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    @tasks.task(timeout=0.2, max_failures=1)
    async def straight(data: None) -> str:
        time.sleep(0.5)  # never gives the loop back
        return "late"

    job = straight.enqueue(None)
    worker_runner.start(tasks)
    # the text protocol §8 step 5 gives every timeout, then why the loop could not stop it
    _failed_with(sync_queue, job.id, "JobTimeoutError: timed out after 0.2 s (it ran ")
    _failed_with(sync_queue, job.id, "while blocking the event loop")


def test_the_watchdog_is_quiet_when_nothing_blocks(
    tasks: Tasks,
    sync_queue: Queue,
    worker_runner: WorkerRunner,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="conveyor.worker")

    @tasks.task
    async def polite(data: Any) -> Any:
        await asyncio.sleep(0.05)
        return data

    jobs = [polite.enqueue(n) for n in range(20)]
    worker_runner.start(tasks, concurrency=5)
    for n, job in enumerate(jobs):
        assert sync_queue.wait_result(job.id, timeout=20) == n
    assert not [r for r in caplog.records if "event loop blocked" in r.getMessage()]

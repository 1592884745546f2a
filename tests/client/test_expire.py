"""Expire if not started, through both clients and a real worker (§16.2)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from conveyor import JobState
from conveyor.client.tasks import Tasks
from conveyor.errors import JobExpiredError, JobFailedError, ValidationError
from support.workers import WorkerRunner


def test_a_job_not_started_by_its_deadline_fails_without_running(
    queue: Any, redis_url: str, queue_name: str, worker_runner: WorkerRunner
) -> None:
    tasks = Tasks(queue_name, url=redis_url)
    ran: list[str] = []

    @tasks.task
    def work(data: str) -> str:
        ran.append(data)
        return data

    late = queue.enqueue("work", "late", expires=0.05).id
    in_time = queue.enqueue("work", "in time", expires=timedelta(minutes=5)).id
    waiting = queue.get(late)
    assert waiting.expires_at is not None and waiting.state is JobState.WAITING
    time.sleep(0.1)  # past the first deadline, before any worker
    worker_runner.start(tasks)
    with pytest.raises(JobExpiredError) as caught:
        queue.wait_result(late, timeout=30)
    assert isinstance(caught.value, JobFailedError)
    assert caught.value.error.startswith("JobExpiredError: not started by its deadline")
    assert queue.wait_result(in_time, timeout=30) == "in time"
    assert ran == ["in time"]
    job = queue.get(late)
    assert (job.state, job.failures) == (JobState.FAILED, 1)
    assert job.error is not None and job.error.startswith("JobExpiredError:")


def test_a_bad_deadline_is_refused_and_writes_nothing(queue: Any) -> None:
    for bad in (0, -1, "soon", datetime.now(UTC) - timedelta(seconds=1), True):
        with pytest.raises(ValidationError):
            queue.enqueue("work", None, id="x", expires=bad)
    assert queue.get("x") is None

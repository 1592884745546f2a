"""Attempt history through a real worker and both clients: each failed run's
error and traceback, readable through get() (protocol §16.1)."""

from __future__ import annotations

from typing import Any

from conveyor import JobState
from conveyor.client.tasks import Tasks
from conveyor.worker import current_job
from support.workers import WorkerRunner, wait_until


def test_get_shows_every_attempts_error_and_traceback(
    queue: Any, redis_url: str, queue_name: str, worker_runner: WorkerRunner
) -> None:
    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task
    def flaky(data: None) -> None:
        attempt = current_job().attempt
        if attempt < 3:
            raise ValueError(f"bad input on try {attempt}")
        raise KeyError("missing for good")

    job_id = queue.enqueue("flaky", None, max_failures=3, min_backoff=0.01, max_backoff=0.01).id
    worker_runner.start(tasks)
    wait_until(lambda: (j := queue.get(job_id)) is not None and j.state is JobState.FAILED)
    job = queue.get(job_id)
    assert [e.attempt for e in job.errors] == [1, 2, 3]
    first, second, last = job.errors
    assert first.error.startswith("ValueError: bad input on try 1\nTraceback (most recent call")
    assert 'in flaky\n    raise ValueError(f"bad input on try {attempt}")' in first.error
    assert second.error.startswith("ValueError: bad input on try 2")
    assert last.error.startswith("KeyError: 'missing for good'")
    assert job.error == last.error
    assert job.started_at is not None and first.at <= second.at <= last.at

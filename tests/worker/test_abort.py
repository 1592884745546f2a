"""Aborting a running job from a client, through Redis: the worker that holds
it cancels the async task, terminates the child process, or sets the thread's
flag, then fails the run for good with AbortedError; waiters are told."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time

import pytest
from click.testing import CliRunner

from conveyor import AsyncQueue, JobState, Queue
from conveyor.client.tasks import Tasks
from conveyor.errors import JobFailedError
from conveyor.integrations.cli import main
from conveyor.worker import current_job
from support import process_app
from support.workers import WorkerRunner, wait_until


@pytest.fixture
def tasks(redis_url: str, queue_name: str) -> Tasks:
    return Tasks(queue_name, url=redis_url)


def _aborted(queue: Queue, job_id: str) -> None:
    with pytest.raises(JobFailedError) as failure:
        queue.wait_result(job_id, timeout=30)
    assert failure.value.error.startswith("AbortedError: aborted by a client")
    record = queue.get(job_id)
    assert record is not None and (record.state, record.failures) == (JobState.FAILED, 1)


def _events(queue: Queue, job_id: str) -> list[str]:
    return [e.name for e in queue.events(after="0", count=1000) if e.job_id == job_id]


def test_an_async_job_is_cancelled_through_the_wake_key_without_waiting_for_a_beat(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    started, cancelled = threading.Event(), threading.Event()

    @tasks.task(max_failures=5)
    async def forever(data: None) -> None:
        started.set()
        try:
            await asyncio.sleep(300)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    job = forever.enqueue(None)
    worker_runner.start(tasks, lease=90.0)  # a beat every 30 s: only the wake-up is fast
    assert started.wait(20)
    asked = time.monotonic()
    assert sync_queue.abort(job.id) == "aborting"
    _aborted(sync_queue, job.id)
    assert time.monotonic() - asked < 20 and cancelled.is_set()
    assert _events(sync_queue, job.id)[-2:] == ["abort_requested", "failed"]


def test_a_busy_worker_hears_of_it_on_its_heartbeat_and_a_thread_sees_the_flag(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    started = threading.Event()
    returned: list[float] = []

    @tasks.task(max_failures=5)
    def patient(data: None) -> str:
        started.set()
        while not current_job().cancelled:
            time.sleep(0.01)
        time.sleep(0.3)  # winds down: the run is not over before it returns
        returned.append(time.time())
        return "stopped"

    job = patient.enqueue(None)
    worker_runner.start(tasks, concurrency=1, lease=1.5)  # full: it waits on no wake key
    assert started.wait(20)
    assert sync_queue.abort(job.id) == "aborting"
    _aborted(sync_queue, job.id)
    record = sync_queue.get(job.id)
    assert record is not None and record.finished_at is not None
    assert record.finished_at.timestamp() >= returned[0] - 0.01


def test_a_process_job_is_terminated_and_its_child_replaced(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    tasks.handlers.update(process_app.tasks.handlers)
    worker = worker_runner.start(tasks, processes=1)
    job = sync_queue.enqueue("sleeps", 300)
    wait_until(lambda: (r := sync_queue.get(job.id)) is not None and r.state == "active", 30)
    jobs = worker.worker._jobs
    assert jobs is not None and jobs.processes is not None
    wait_until(lambda: jobs.processes is not None and len(jobs.processes.pids) == 1, 30)
    [child] = jobs.processes.pids
    assert sync_queue.abort(job.id) == "aborting"
    _aborted(sync_queue, job.id)
    with pytest.raises(ProcessLookupError):
        wait_until(lambda: os.kill(child, 0) and False, 10)
    assert sync_queue.wait_result(sync_queue.enqueue("sleeps", 0).id, timeout=30) != child


def test_a_job_not_started_is_cancelled_from_either_client(
    tasks: Tasks, sync_queue: Queue, redis_url: str, queue_name: str
) -> None:
    waiting = sync_queue.enqueue("t", None)
    later = sync_queue.enqueue("t", None, delay=60)
    assert sync_queue.abort(waiting.id) == "cancelled"

    async def from_async() -> list[str]:
        async with AsyncQueue(queue_name, url=redis_url) as queue:
            return [await queue.abort(later.id), await queue.abort(later.id)]

    assert asyncio.run(from_async()) == ["cancelled", "missing"]
    assert sync_queue.get(waiting.id) is None and sync_queue.get(later.id) is None


def test_the_cli_aborts(redis_url: str, queue_name: str, sync_queue: Queue) -> None:
    job = sync_queue.enqueue("t", None)
    done = CliRunner().invoke(main, ["abort", queue_name, job.id, "--json", "--url", redis_url])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["outcome"] == "cancelled"
    again = CliRunner().invoke(main, ["abort", queue_name, job.id, "--json", "--url", redis_url])
    assert again.exit_code == 1 and json.loads(again.output)["outcome"] == "missing"

"""A handler that meets an external limit raises RateLimited: its job goes
back unpunished and the queue (or the group) waits (protocol §16.4)."""

from __future__ import annotations

import time
from typing import Any

from conveyor import JobState, RateLimited
from conveyor.client.tasks import Tasks
from conveyor.worker import current_job
from support.workers import WorkerRunner


def test_rate_limited_job_goes_back_unpunished_and_the_queue_waits(
    queue: Any, redis_url: str, queue_name: str, worker_runner: WorkerRunner
) -> None:
    tasks = Tasks(queue_name, url=redis_url)
    @tasks.task
    def call_api(data: str) -> str:
        if data == "first" and current_job().attempt == 1:
            raise RateLimited(0.5)  # "429, retry after 0.5 s"
        return data

    first = queue.enqueue("call_api", "first", max_failures=1).id
    second = queue.enqueue("call_api", "second").id
    worker_runner.start(tasks, concurrency=1)
    assert queue.wait_result(first, timeout=30) == "first"
    assert queue.wait_result(second, timeout=30) == "second"
    job = queue.get(first)
    assert (job.state, job.failures, job.errors) == (JobState.COMPLETED, 0, ())
    events = queue.events(after="0-0", count=1000)
    (limited,) = [e for e in events if e.name == "rate_limited"]
    assert (limited.job_id, limited.fields["scope"], limited.fields["wait_ms"]) == (
        first, "queue", "500",
    )  # fmt: skip
    # from the hold on, nothing starts for 500 ms (a job claimed before it was
    # written may have started: the outcome is written after the handler ends)
    hold_ms = _ms(limited.stream_id)
    started = [_ms(e.stream_id) for e in events if e.name == "active"]
    assert [t for t in started if hold_ms < t < hold_ms + 498] == []
    assert max(started) >= hold_ms + 498  # the first job ran again after the hold


def _ms(stream_id: str) -> int:
    return int(stream_id.split("-")[0])


def test_a_group_scope_holds_only_the_group(
    queue: Any, redis_url: str, queue_name: str, worker_runner: WorkerRunner
) -> None:
    tasks = Tasks(queue_name, url=redis_url)
    done_at: dict[str, float] = {}

    @tasks.task
    def call(data: str) -> None:
        if data == "a1" and current_job().attempt == 1:
            raise RateLimited(30, scope="group")
        done_at[data] = time.monotonic()

    queue.enqueue("call", "a1", group="tenant-a")
    other = queue.enqueue("call", "b1", group="tenant-b").id
    worker_runner.start(tasks, concurrency=1)
    queue.wait_result(other, timeout=30)
    assert "a1" not in done_at  # tenant-a waits 30 s; tenant-b ran
    assert queue.counts()[JobState.WAITING] == 1

"""Failure handlers run as jobs of the queue's failure lane."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis

from conveyor import JobState, PermanentError, Queue
from conveyor.client.tasks import Tasks
from conveyor.client.transport import SyncRunner
from conveyor.errors import JobFailedError
from conveyor.protocol import ops
from support.workers import WorkerRunner, wait_until


@pytest.fixture
def tasks(redis_url: str, queue_name: str) -> Tasks:
    return Tasks(queue_name, url=redis_url)


def test_a_job_that_fails_for_good_runs_its_failure_handler(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    seen: list[dict[str, Any]] = []

    @tasks.task(max_failures=2, min_backoff=0, max_backoff=0)
    async def charge(data: dict[str, int]) -> None:
        raise RuntimeError(f"card declined for {data['amount']}")

    @charge.on_failure
    async def refund(info: dict[str, Any]) -> str:
        seen.append(info)
        return "refunded"

    @tasks.task
    async def fine(data: None) -> None:
        raise PermanentError("no handler here")

    job = charge.enqueue({"amount": 5})
    other = fine.enqueue(None)
    worker_runner.start(tasks)
    worker_runner.start(tasks, failures=True)
    with pytest.raises(JobFailedError):
        sync_queue.wait_result(job.id, timeout=10)
    with pytest.raises(JobFailedError):
        sync_queue.wait_result(other.id, timeout=10)
    wait_until(lambda: seen, timeout=10)
    (info,) = seen
    assert info["data"] == {"amount": 5}
    assert info["error"].startswith("RuntimeError: card declined for 5")
    assert info["job"]["id"] == job.id and info["job"]["task"] == "charge"
    assert (info["job"]["attempts"], info["job"]["failures"]) == (2, 2)
    lane = sync_queue.failure_lane()
    wait_until(lambda: lane.counts()[JobState.COMPLETED] == 1)
    assert sum(lane.counts().values()) == 1  # the task without a handler made no lane job
    (lane_id,) = lane.job_ids("completed")
    assert lane_id.startswith(job.id + "@")
    assert lane.get(lane_id).result == "refunded"  # type: ignore[union-attr]
    assert lane.get(lane_id).max_failures == 10  # type: ignore[union-attr]


def test_a_job_failed_by_stalls_hands_over_a_stall_error(
    tasks: Tasks, sync_queue: Queue, redis_client: redis.Redis
) -> None:
    @tasks.task
    async def work(data: str) -> None:
        return None

    @work.on_failure
    async def handle(info: dict[str, Any]) -> None:
        return None

    redis_client.sadd(sync_queue.core.keys.failure_tasks, "work")  # what a worker registers
    done = work.enqueue("x", max_stalls=1)
    runner = SyncRunner(redis_client, sync_queue.core.scripts)
    call = ops.claim(
        sync_queue.core.keys, worker_id="dead", count=1, lease_ms=50, token="t", promote=1,
        events_maxlen=100,
    )  # fmt: skip
    runner.run(call)
    time.sleep(0.1)
    runner.run(ops.reap(sync_queue.core.keys, batch=10, events_maxlen=100))
    assert sync_queue.get(done.id).state is JobState.FAILED  # type: ignore[union-attr]
    lane = sync_queue.failure_lane()
    (lane_id,) = lane.job_ids("waiting")
    payload = lane.get(lane_id).data  # type: ignore[union-attr]
    assert payload["data"] == "x" and payload["error"].startswith("StalledError")
    assert json.dumps(payload["job"]["stalls"]) == "1"


def test_a_failure_handler_gets_data_stored_in_pieces_whole(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    """Data over 64 bytes is stored in pieces (protocol §4.1); so is the lane job's."""
    text = "".join("x" * (k % 7) + "é€😀"[k % 3] for k in range(502))  # about 3 KB
    seen: list[dict[str, Any]] = []

    @tasks.task
    async def parse(data: dict[str, str]) -> None:
        raise PermanentError(f"cannot parse {len(data['text'])} characters")

    @parse.on_failure
    async def report(info: dict[str, Any]) -> None:
        seen.append(info)

    job = parse.enqueue({"text": text})
    worker_runner.start(tasks)
    worker_runner.start(tasks, failures=True)
    wait_until(lambda: seen, timeout=10)
    assert seen[0]["data"] == {"text": text}
    assert seen[0]["error"].endswith(f"cannot parse {len(text)} characters")
    assert sync_queue.get(job.id).data == {"text": text}  # type: ignore[union-attr]

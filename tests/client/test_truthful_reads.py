"""Reads that tell the truth, through both clients: a finished job past its
result_ttl is gone for get(), counts(), job_ids() and find() even while its
record awaits a sweep; a blocked twin is readable (docs/protocol.md §4.3, §4.4)."""

from __future__ import annotations

import time
from typing import Any

import redis

from conveyor import JobState
from conveyor.client.transport import SyncRunner
from conveyor.protocol import ops


def _core(queue: Any) -> Any:
    return queue.core if hasattr(queue, "core") else queue.inner.core


def _runner(queue: Any, redis_client: redis.Redis) -> SyncRunner:
    return SyncRunner(redis_client, _core(queue).scripts)


def _claim(queue: Any, redis_client: redis.Redis, token: str = "t") -> list[str]:
    core = _core(queue)
    claim = ops.claim(
        core.keys, worker_id="w", count=10, lease_ms=60_000, token=token, promote=10,
        events_maxlen=100,
    )  # fmt: skip
    return [j.id for j in ops.decode_claim(_runner(queue, redis_client).run(claim)).jobs]


def _complete(queue: Any, redis_client: redis.Redis, job_id: str, token: str = "t") -> None:
    call = ops.complete(_core(queue).keys, [(job_id, token, "1")], events_maxlen=100)
    assert _runner(queue, redis_client).run(call) == [1]


def _server_ms(redis_client: redis.Redis) -> int:
    seconds, micros = redis_client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _wait_past(redis_client: redis.Redis, moment_ms: int) -> None:
    """Until the server clock passes `moment_ms` (generous on a loaded machine)."""
    deadline = time.monotonic() + 30
    while _server_ms(redis_client) <= moment_ms:
        assert time.monotonic() < deadline, "the server clock did not move on"
        time.sleep(0.02)


def test_a_finished_job_past_its_result_ttl_reads_as_gone(
    queue: Any, redis_client: redis.Redis
) -> None:
    queue.enqueue("t", None, id="short", result_ttl=0.3, index={"user": 7})
    queue.enqueue("t", None, id="long", index={"user": 7})
    assert _claim(queue, redis_client) == ["short", "long"]
    _complete(queue, redis_client, "short")
    _complete(queue, redis_client, "long")
    finished = queue.get("short")
    assert finished is not None and finished.state is JobState.COMPLETED
    assert finished.retained_until is not None and finished.finished_at is not None
    assert (finished.retained_until - finished.finished_at).total_seconds() == 0.3
    assert queue.counts()[JobState.COMPLETED] == 2

    _wait_past(redis_client, round(finished.retained_until.timestamp() * 1000))
    core = _core(queue)
    # no sweep ran: the record and its index entry are still in Redis ...
    assert redis_client.exists(core.keys.job("short")) == 1
    assert redis_client.zcard(core.keys.completed) == 2
    # ... but every read treats the job as gone
    assert queue.get("short") is None
    assert queue.counts()[JobState.COMPLETED] == 1
    assert queue.job_ids("completed") == ["long"]
    assert [job.id for job in queue.find("user", 7)] == ["long"]
    assert queue.get("long") is not None


def test_a_blocked_twin_is_readable(queue: Any, redis_client: redis.Redis) -> None:
    queue.enqueue("t", {"n": 1}, id="single")
    assert _claim(queue, redis_client) == ["single"]
    assert queue.get_blocked("single") is None
    assert queue.enqueue("t", {"n": 2}, id="single", priority=5).outcome == "blocked"
    twin = queue.get_blocked("single")
    assert twin is not None
    assert (twin.state, twin.data, twin.attempts) == (JobState.BLOCKED, {"n": 2}, 0)
    running = queue.get("single")
    assert running is not None and (running.state, running.data) == (JobState.ACTIVE, {"n": 1})
    assert queue.counts()[JobState.BLOCKED] == 1
    _complete(queue, redis_client, "single")
    assert queue.get_blocked("single") is None  # it became the job
    job = queue.get("single")
    assert job is not None and (job.state, job.data) == (JobState.WAITING, {"n": 2})

"""wait_result blocks on Redis (BLMOVE on done:<id>) until the job's run ends."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis

from conveyor import Queue
from conveyor.client.transport import SyncRunner
from conveyor.errors import JobFailedError, JobNotFoundError, WaitTimeoutError
from conveyor.protocol import ops


def _finish(queue: Any, redis_client: redis.Redis, *, ok: bool, after: float = 0.0) -> None:
    """Claim the next job and end it, as a worker would."""
    core = queue.core if hasattr(queue, "core") else queue.inner.core
    runner = SyncRunner(redis_client, core.scripts)
    time.sleep(after)
    claimed = ops.decode_claim(
        runner.run(
            ops.claim(
                core.keys, worker_id="w", count=1, lease_ms=10_000, token="tok", promote=10,
                events_maxlen=100,
            )
        )
    ).jobs[0]  # fmt: skip
    if ok:
        runner.run(
            ops.complete(core.keys, [(claimed.id, "tok", '{"answer": 42}')], events_maxlen=100)
        )
    else:
        item = ops.FailItem(claimed.id, "tok", "Boom: broken", True, None, 0.0)
        runner.run(ops.fail(core.keys, [item], events_maxlen=100))


def _finish_later(queue: Any, redis_client: redis.Redis, *, ok: bool, after: float) -> Any:
    thread = threading.Thread(
        target=_finish, args=(queue, redis_client), kwargs={"ok": ok, "after": after}
    )
    thread.start()
    return thread


def test_wait_returns_a_result_that_arrives_later(queue: Any, redis_client: redis.Redis) -> None:
    job = queue.enqueue("t", None)
    finisher = _finish_later(queue, redis_client, ok=True, after=0.3)
    started = time.monotonic()
    assert queue.wait_result(job.id, timeout=10) == {"answer": 42}
    assert 0.25 < time.monotonic() - started < 5
    finisher.join(5)  # its client is closed at teardown: let it read its reply first


def test_wait_on_a_finished_job_returns_at_once(queue: Any, redis_client: redis.Redis) -> None:
    job = queue.enqueue("t", None)
    _finish(queue, redis_client, ok=True)
    assert queue.wait_result(job.id, timeout=0.01) == {"answer": 42}


def test_wait_raises_the_failure(queue: Any, redis_client: redis.Redis) -> None:
    job = queue.enqueue("t", None)
    finisher = _finish_later(queue, redis_client, ok=False, after=0.2)
    with pytest.raises(JobFailedError) as raised:
        queue.wait_result(job.id, timeout=10)
    assert raised.value.job_id == job.id and raised.value.error == "Boom: broken"
    finisher.join(5)


def test_wait_times_out_and_missing_jobs_are_reported(queue: Any) -> None:
    job = queue.enqueue("t", None)
    started = time.monotonic()
    with pytest.raises(WaitTimeoutError):
        queue.wait_result(job.id, timeout=0.3)
    assert 0.25 < time.monotonic() - started < 3
    with pytest.raises(JobNotFoundError):
        queue.wait_result("no-such-job", timeout=1)


def test_waits_longer_than_the_socket_timeout_work(
    redis_url: str, queue_name: str, redis_client: redis.Redis
) -> None:
    client = redis.Redis.from_url(redis_url, socket_timeout=1.0)
    with Queue(queue_name, client=client) as queue:
        job = queue.enqueue("t", None)
        finisher = _finish_later(queue, redis_client, ok=True, after=2.5)
        assert queue.wait_result(job.id, timeout=10) == {"answer": 42}
        finisher.join(5)

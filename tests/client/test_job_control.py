"""Job control, lookup by property, retention, singletons and LIFO, through both clients."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from conveyor import JobState
from conveyor.client.transport import SyncRunner
from conveyor.errors import ValidationError
from conveyor.protocol import ops


def _core(queue: Any) -> Any:
    return queue.core if hasattr(queue, "core") else queue.inner.core


def _work(queue: Any, redis_client: redis.Redis, *, ok: bool = True, count: int = 1) -> list[str]:
    """Claim `count` jobs and end them as a worker would; returns their ids."""
    core = _core(queue)
    runner = SyncRunner(redis_client, core.scripts)
    claim = ops.claim(
        core.keys, worker_id="w", count=count, lease_ms=10_000, token="t", promote=10,
        events_maxlen=100,
    )  # fmt: skip
    ids = [j.id for j in ops.decode_claim(runner.run(claim)).jobs]
    for job_id in ids:
        if ok:
            runner.run(ops.complete(core.keys, [(job_id, "t", "1")], events_maxlen=100))
        else:
            item = ops.FailItem(job_id, "t", "boom", True, None, 0.0)
            runner.run(ops.fail(core.keys, [item], events_maxlen=100))
    return ids


def test_promote_runs_a_delayed_job_now(queue: Any, redis_client: redis.Redis) -> None:
    queue.enqueue("t", None, id="later", delay=3600)
    queue.enqueue("t", None, id="now")
    assert queue.promote("later") is True
    assert queue.get("later").state is JobState.WAITING
    assert queue.promote("now") is False  # not delayed
    assert queue.promote("missing") is False
    assert _work(queue, redis_client, count=2) == ["later", "now"]  # kept its enqueue order


def test_set_priority_moves_a_waiting_job(queue: Any, redis_client: redis.Redis) -> None:
    for job_id in ("a", "b", "c"):
        queue.enqueue("t", None, id=job_id)
    assert queue.set_priority("c", "high") is True
    assert queue.get("c").priority == 0
    assert queue.job_ids("waiting") == ["c", "a", "b"]
    with pytest.raises(ValidationError):
        queue.set_priority("a", 2**22)
    _work(queue, redis_client)
    assert queue.set_priority("c", 5) is False  # finished


def test_retry_and_remove(queue: Any, redis_client: redis.Redis) -> None:
    queue.enqueue("t", None, id="f")
    _work(queue, redis_client, ok=False)
    assert queue.get("f").state is JobState.FAILED
    assert queue.retry("f") is True
    job = queue.get("f")
    assert (job.state, job.failures, job.attempts) == (JobState.WAITING, 0, 1)
    assert queue.retry("f") is False
    assert queue.remove("f") == "removed"
    assert queue.get("f") is None and queue.remove("f") == "missing"
    queue.enqueue("t", None, id="running")
    _core(queue)  # claim without ending it
    runner = SyncRunner(redis_client, _core(queue).scripts)
    runner.run(
        ops.claim(_core(queue).keys, worker_id="w", count=1, lease_ms=10_000, token="t",
                  promote=1, events_maxlen=10)
    )  # fmt: skip
    assert queue.remove("running") == "active"
    assert sum(queue.counts().values()) == 1


def test_find_jobs_by_an_indexed_property(queue: Any, redis_client: redis.Redis) -> None:
    for i in range(5):
        queue.enqueue("t", {"n": i}, id=f"j{i}", index={"user_id": 42 if i % 2 else 7})
    queue.enqueue("t", None, id="other")
    assert [j.id for j in queue.find("user_id", 42)] == ["j3", "j1"]
    assert [j.data for j in queue.find("user_id", "7", limit=2)] == [{"n": 4}, {"n": 2}]
    assert queue.find("user_id", 99) == []
    queue.cancel("j3")
    assert [j.id for j in queue.find("user_id", 42)] == ["j1"]  # deletion unindexes
    with pytest.raises(ValidationError):
        queue.enqueue("t", None, index={"user id": 1})
    with pytest.raises(ValidationError):
        queue.enqueue("t", None, index={"user_id": "a\nb"})


def test_retention_by_count(queue: Any, redis_client: redis.Redis) -> None:
    queue.set_retention(completed=3)
    for i in range(8):
        queue.enqueue("t", None, id=f"c{i}", result_ttl=3600)
    _work(queue, redis_client, count=8)
    ids = queue.job_ids("completed")
    assert len(ids) <= 3 + 2  # each finish trims up to 2 beyond the count
    _work(queue, redis_client, count=0)
    queue.enqueue("t", None, id="last")
    _work(queue, redis_client)
    assert queue.counts()[JobState.COMPLETED] == 3
    assert "last" in queue.job_ids("completed")
    queue.set_retention()
    with pytest.raises(ValidationError):
        queue.set_retention(failed=-1)


def test_retention_by_age_expires_records(queue: Any, redis_client: redis.Redis) -> None:
    queue.enqueue("t", None, id="short", result_ttl=0.05)
    queue.enqueue("t", None, id="gone", result_ttl=0)
    _work(queue, redis_client, count=2)
    assert queue.get("gone") is None  # removed on completion
    assert queue.get("short").state is JobState.COMPLETED
    time.sleep(0.1)
    queue.enqueue("t", None, id="next")
    _work(queue, redis_client)  # the next finish sweeps the expired record
    assert queue.get("short") is None and queue.job_ids("completed") == ["next"]


def test_an_id_never_runs_twice_at_once(queue: Any, redis_client: redis.Redis) -> None:
    queue.enqueue("t", {"v": 1}, id="solo")
    runner = SyncRunner(redis_client, _core(queue).scripts)
    keys = _core(queue).keys
    runner.run(
        ops.claim(keys, worker_id="w", count=1, lease_ms=10_000, token="t", promote=1,
                  events_maxlen=10)
    )  # fmt: skip
    again = queue.enqueue("t", {"v": 2}, id="solo")
    assert (again.outcome, again.state) == ("blocked", JobState.ACTIVE)
    assert queue.counts()[JobState.BLOCKED] == 1
    claimed = ops.decode_claim(
        runner.run(ops.claim(keys, worker_id="w2", count=5, lease_ms=10_000, token="u",
                             promote=1, events_maxlen=10))
    )  # fmt: skip
    assert claimed.jobs == []  # the blocked twin is not runnable while the job runs
    runner.run(ops.complete(keys, [("solo", "t", "1")], events_maxlen=10))
    job = queue.get("solo")
    assert (job.state, job.data, job.attempts) == (JobState.WAITING, {"v": 2}, 0)


def test_lifo_jobs_run_newest_first_within_a_priority(queue: Any) -> None:
    queue.enqueue("t", None, id="fifo")
    for job_id in ("l1", "l2", "l3"):
        queue.enqueue("t", None, id=job_id, lifo=True)
    queue.enqueue("t", None, id="urgent", priority="high")
    assert queue.job_ids("waiting") == ["urgent", "l3", "l2", "l1", "fifo"]

"""The operator's reads and bulk actions (dashboard, CLI), through both clients."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from conveyor import JobState
from conveyor.client.transport import SyncRunner
from conveyor.errors import ValidationError
from conveyor.protocol import ops


def _core(queue: Any) -> Any:
    return queue.core if hasattr(queue, "core") else queue.inner.core


def _fail(queue: Any, redis_client: redis.Redis, count: int) -> list[str]:
    """Claim `count` jobs and fail them for good, as a worker would."""
    core = _core(queue)
    runner = SyncRunner(redis_client, core.scripts)
    claim = ops.claim(
        core.keys, worker_id="w", count=count, lease_ms=10_000, token="t", promote=10,
        events_maxlen=100,
    )  # fmt: skip
    ids = [j.id for j in ops.decode_claim(runner.run(claim)).jobs]
    items = [ops.FailItem(i, "t", "boom\nTraceback", True, None, 0.0) for i in ids]
    runner.run(ops.fail(core.keys, items, events_maxlen=100))
    return ids


def test_overview_of_a_queue_no_client_used(queue: Any) -> None:
    seen = queue.overview()
    assert seen.exists is False
    assert seen.name == queue.name
    assert set(seen.counts.values()) == {0}
    assert not seen.paused and not seen.limits.any and seen.groups == []


def test_overview_counts_paused_limits_and_groups(queue: Any) -> None:
    queue.enqueue("t", None, id="a")
    queue.enqueue("t", None, id="b", delay=3600)
    for n in range(3):
        queue.enqueue("t", None, id=f"g{n}", group="acme")
    queue.enqueue("t", None, id="z", group="zeta")
    queue.set_limits(concurrency=4, rate=10, per=2.0)
    queue.set_group_limits(concurrency=2)
    queue.set_group_limits("acme", rate=5)
    queue.pause_group("zeta")
    queue.pause()
    seen = queue.overview()
    assert seen.exists and seen.paused
    assert seen.counts[JobState.WAITING] == 5
    assert seen.counts[JobState.DELAYED] == 1
    assert (seen.limits.concurrency, seen.limits.rate, seen.limits.per) == (4, 10, 2.0)
    assert seen.group_limits.concurrency == 2 and seen.group_limits.rate is None
    acme, zeta = seen.groups
    assert (acme.name, acme.waiting, acme.paused, acme.limits.rate) == ("acme", 3, False, 5)
    assert (zeta.name, zeta.waiting, zeta.paused) == ("zeta", 1, True)
    assert seen.groups_total == 2
    queue.resume()
    assert queue.overview().paused is False


def test_known_queues_lists_the_queues_clients_used(queue: Any, queue_name: str) -> None:
    queue.enqueue("t", None)
    assert queue_name in queue.known_queues()


def test_get_many_keeps_order_and_marks_missing(queue: Any) -> None:
    queue.enqueue("t", {"n": 1}, id="one")
    queue.enqueue("t", {"n": 2}, id="two")
    jobs = queue.get_many(["two", "gone", "one"])
    assert [j.id if j else None for j in jobs] == ["two", None, "one"]
    assert jobs[0].data == {"n": 2}
    assert queue.get_many([]) == []
    with pytest.raises(ValidationError):
        queue.get_many(["bad id"])


def test_job_events_are_one_jobs_oldest_first(queue: Any, redis_client: redis.Redis) -> None:
    queue.enqueue("t", None, id="mine", max_failures=1)
    queue.enqueue("t", None, id="other")
    _fail(queue, redis_client, 1)
    events = queue.job_events("mine")
    assert [e.name for e in events] == ["created", "active", "failed"]
    assert all(e.job_id == "mine" for e in events)
    assert "boom" in events[-1].fields["error"]


def test_retry_failed_retries_every_failed_job(queue: Any, redis_client: redis.Redis) -> None:
    for n in range(7):
        queue.enqueue("t", None, id=f"j{n}", max_failures=1)
    assert len(_fail(queue, redis_client, 7)) == 7
    assert queue.retry_failed(batch=3) == 7
    counts = queue.counts()
    assert (counts[JobState.FAILED], counts[JobState.WAITING]) == (0, 7)
    assert queue.retry_failed() == 0
    with pytest.raises(ValidationError):
        queue.retry_failed(batch=0)


def test_purge_empties_one_state_and_leaves_the_rest(queue: Any) -> None:
    for n in range(5):
        queue.enqueue("t", None, id=f"w{n}")
    queue.enqueue("t", None, id="g", group="acme")
    queue.enqueue("t", None, id="d", delay=3600)
    assert queue.purge("waiting", batch=2) == 6
    counts = queue.counts()
    assert (counts[JobState.WAITING], counts[JobState.DELAYED]) == (0, 1)
    assert queue.get("w0") is None and queue.get("d") is not None
    with pytest.raises(ValidationError):
        queue.purge("active")
    with pytest.raises(ValidationError):
        queue.purge("nonsense")


def test_job_ids_read_from_either_end(queue: Any) -> None:
    for job_id in ("a", "b", "c", "d"):
        queue.enqueue("t", None, id=job_id)
    assert queue.job_ids("waiting", limit=2) == ["a", "b"]
    assert queue.job_ids("waiting", limit=2, reverse=True) == ["d", "c"]
    assert queue.job_ids("waiting", offset=1, limit=2, reverse=True) == ["c", "b"]


def test_an_entry_naming_several_jobs_reads_as_one_event_per_job(
    queue: Any, redis_client: redis.Redis
) -> None:
    """Protocol §11: claim and complete write one entry per call; readers see one per job."""
    for n in range(3):
        queue.enqueue("t", None, id=f"j{n}")
    core = _core(queue)
    runner = SyncRunner(redis_client, core.scripts)
    claim = ops.claim(
        core.keys, worker_id="w-3", count=3, lease_ms=10_000, token="t", promote=10,
        events_maxlen=100,
    )  # fmt: skip
    ids = [j.id for j in ops.decode_claim(runner.run(claim)).jobs]
    runner.run(ops.complete(core.keys, [(i, "t", "1") for i in ids], events_maxlen=100))
    assert redis_client.xlen(core.keys.events) == 3 + 1 + 1  # created each, one active, one done
    events = [e for e in queue.events(after="0-0") if e.name != "created"]
    assert [(e.name, e.job_id) for e in events] == [("active", i) for i in ids] + [
        ("completed", i) for i in ids
    ]
    assert [e.fields for e in events[:3]] == [{"attempt": "1", "worker": "w-3"}] * 3
    assert len({e.stream_id for e in events[:3]}) == 1
    assert [e.name for e in queue.job_events("j1")] == ["created", "active", "completed"]

"""Concurrency keys and a group's max_waiting through both clients (§16.5)."""

from __future__ import annotations

from typing import Any

import pytest

from conveyor import JobRequest, JobState
from conveyor.client.transport import SyncRunner
from conveyor.errors import GroupFullError, ValidationError
from conveyor.protocol import ops


def _core(queue: Any) -> Any:
    return queue.core if hasattr(queue, "core") else queue.inner.core


def _claim(queue: Any, redis_client: Any, token: str = "t") -> list[str]:
    core = _core(queue)
    call = ops.claim(
        core.keys, worker_id="w", count=10, lease_ms=60_000, token=token, promote=10,
        events_maxlen=100,
    )  # fmt: skip
    return [j.id for j in ops.decode_claim(SyncRunner(redis_client, core.scripts).run(call)).jobs]


def _complete(queue: Any, redis_client: Any, job_id: str, token: str = "t") -> None:
    call = ops.complete(_core(queue).keys, [(job_id, token, "1")], events_maxlen=100)
    assert SyncRunner(redis_client, _core(queue).scripts).run(call) == [1]


def test_several_keys_per_job_each_with_its_limit(queue: Any, redis_client: Any) -> None:
    queue.set_key_limits("tenant-1", concurrency=1)
    queue.set_key_limits("customer-9", concurrency=5, rate=100, per=1)
    queue.enqueue("t", 1, id="a", concurrency_keys=["tenant-1", "customer-9"])
    queue.enqueue("t", 2, id="b", concurrency_keys=["tenant-1"])
    queue.enqueue("t", 3, id="c", concurrency_keys=["customer-9"])
    assert _claim(queue, redis_client) == ["a", "c"]
    assert queue.counts()[JobState.WAITING] == 1  # b, parked on tenant-1
    assert queue.get("b").state is JobState.WAITING
    queue.set_key_limits("tenant-1", concurrency=2)  # changed at run time: b may run
    assert _claim(queue, redis_client, "t2") == ["b"]
    _complete(queue, redis_client, "a")


def test_max_waiting_refuses_beyond_the_cap(queue: Any) -> None:
    queue.set_group_limits("tenant-7", max_waiting=2)
    queue.enqueue("t", None, group="tenant-7")
    queue.enqueue("t", None, group="tenant-7")
    with pytest.raises(GroupFullError) as caught:
        queue.enqueue("t", None, id="third", group="tenant-7")
    assert caught.value.refused == ["third"]
    assert queue.get("third") is None
    with pytest.raises(GroupFullError) as many:
        queue.enqueue_many(
            [JobRequest("t", 1, {"group": "tenant-7"}), JobRequest("t", 2, {"group": "other"})]
        )
    assert [r.outcome for r in many.value.results] == ["refused", "created"]
    assert queue.counts()[JobState.WAITING] == 3


@pytest.mark.parametrize(
    "keys", ["tenant-1", [], ["a"] * 2, ["a", "b", "c", "d", "e"], ["bad key"], [1]]
)
def test_bad_concurrency_keys_write_nothing(queue: Any, keys: Any) -> None:
    with pytest.raises(ValidationError):
        queue.enqueue("t", None, id="x", concurrency_keys=keys)
    assert queue.get("x") is None


def test_bad_key_limits_are_refused(queue: Any) -> None:
    with pytest.raises(ValidationError):
        queue.set_key_limits("bad key", concurrency=1)
    with pytest.raises(ValidationError):
        queue.set_group_limits("g", max_waiting=0)

"""remove.lua: deleting a job that is not running, whatever its state."""

from __future__ import annotations

import pytest

from .harness import Proto


def indexes(q: Proto) -> list[str]:
    k = q.keys
    return [k.ready, k.scheduled, k.active, k.completed, k.failed, k.blocked]


@pytest.mark.parametrize("state", ["waiting", "delayed", "completed", "failed"])
def test_a_job_that_is_not_running_is_deleted_from_every_index(q: Proto, state: str) -> None:
    q.put("a", state, index={"user_id": 1, "org": "x"})
    q.enqueue("keep", index={"user_id": 1})
    events = len(q.events())
    assert q.remove("a") == "removed"
    assert q.r.exists(q.keys.job("a")) == 0
    for index in indexes(q):
        assert q.score(index, "a") is None, index
    assert q.members(q.keys.index("user_id", "1")) == ["keep"]
    assert q.r.exists(q.keys.index("org", "x")) == 0
    assert q.events()[events:] == [{"event": "removed", "id": "a"}]
    assert q.job("keep")["state"] == "waiting"
    assert q.members(q.keys.ready) == ["keep"]


def test_a_grouped_waiting_job_leaves_its_group(q: Proto) -> None:
    q.enqueue("g1", group="g")
    q.enqueue("g2", group="g")
    assert q.remove("g1") == "removed"
    assert q.members(q.keys.group_ready("g")) == ["g2"]
    assert q.claimed_ids(5) == ["g2"]


def test_a_running_job_is_refused_and_keeps_its_lease(q: Proto) -> None:
    q.start("a", token="t", index={"user_id": 1})
    before = q.snapshot("a")
    assert q.remove("a") == "active"
    assert q.snapshot("a") == before
    assert q.members(q.keys.index("user_id", "1")) == ["a"]
    assert q.complete_one("a", "t")


def test_a_running_job_keeps_its_blocked_twin(q: Proto) -> None:
    q.start("s", token="t")
    q.enqueue("s", data=2)
    before = q.snapshot("s")
    assert q.remove("s") == "active"
    assert q.snapshot("s") == before
    assert q.members(q.keys.blocked) == ["s"]


def test_a_blocked_twin_beside_a_record_that_no_longer_runs_is_deleted(q: Proto) -> None:
    q.start("s", token="t")
    q.enqueue("s", data=2)
    assert q.twin("s")["state"] == "blocked"
    # the run ended without the hand-over of its twin (not something the scripts do)
    q.r.hset(q.keys.job("s"), "state", "failed")
    q.r.hdel(q.keys.job("s"), "token")
    q.r.zrem(q.keys.active, "s")
    q.r.zadd(q.keys.failed, {"s": q.now() + 60_000})
    assert q.remove("s") == "removed"
    assert q.r.exists(q.keys.job("s"), q.keys.blocked_job("s")) == 0
    assert q.members(q.keys.blocked) == []
    assert q.members(q.keys.failed) == []


def test_a_missing_job_changes_nothing(q: Proto) -> None:
    q.enqueue("other")
    before = q.snapshot("nope", "other")
    assert q.remove("nope") == "missing"
    assert q.snapshot("nope", "other") == before
    assert q.events("removed") == []


def test_a_removed_id_can_be_enqueued_afresh(q: Proto) -> None:
    q.put("a", "completed")
    assert q.remove("a") == "removed"
    out = q.enqueue("a", data=3)
    assert (out.outcome, out.state) == ("created", "waiting")
    assert q.job("a")["attempts"] == "0"
    assert q.members(q.keys.completed) == []

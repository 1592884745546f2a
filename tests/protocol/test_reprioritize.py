"""reprioritize.lua: a new priority for a job that has not started, keeping its seq."""

from __future__ import annotations

import pytest

from .harness import SEQ_SPAN, Proto


def test_a_waiting_job_is_rescored_keeping_its_seq(q: Proto) -> None:
    for job_id in ("a", "b", "c"):
        q.enqueue(job_id)
    seq = q.job("c")["seq"]
    assert q.reprioritize("c", 0) == 1
    job = q.job("c")
    assert (job["priority"], job["seq"], job["state"]) == ("0", seq, "waiting")
    assert q.score(q.keys.ready, "c") == int(seq)  # 0 * 2^31 + seq
    assert q.members(q.keys.ready) == ["c", "a", "b"]
    assert q.events("reprioritized") == [{"event": "reprioritized", "id": "c", "priority": "0"}]


def test_a_lower_priority_moves_a_job_back_and_equal_priorities_stay_fifo(q: Proto) -> None:
    for job_id in ("a", "b", "c"):
        q.enqueue(job_id, priority=10)
    assert q.reprioritize("a", 2**21) == 1
    assert q.members(q.keys.ready) == ["b", "c", "a"]
    assert q.score(q.keys.ready, "a") == 2**21 * SEQ_SPAN + int(q.job("a")["seq"])
    assert q.reprioritize("a", 10) == 1  # back to its original place
    assert q.members(q.keys.ready) == ["a", "b", "c"]
    assert q.claimed_ids(3) == ["a", "b", "c"]


def test_a_grouped_job_is_rescored_in_its_group(q: Proto) -> None:
    q.enqueue("g1", group="g")
    q.enqueue("g2", group="g")
    q.enqueue("u")
    assert q.reprioritize("g2", 1) == 1
    assert q.members(q.keys.group_ready("g")) == ["g2", "g1"]
    assert q.score(q.keys.group_ready("g"), "g2") == q.ready_score("g2")
    assert q.members(q.keys.ready) == ["u"]  # no stray entry in the ungrouped index


def test_a_delayed_job_keeps_its_due_time_and_runs_at_its_new_priority(q: Proto) -> None:
    q.enqueue("d", delay=60, priority=9)
    due = q.score(q.keys.scheduled, "d")
    assert q.reprioritize("d", 4) == 1
    job = q.job("d")
    assert (job["state"], job["priority"]) == ("delayed", "4")
    assert q.score(q.keys.scheduled, "d") == due
    assert q.members(q.keys.ready) == []
    assert q.events("reprioritized") == [{"event": "reprioritized", "id": "d", "priority": "4"}]
    assert q.promote("d") == 1
    assert q.score(q.keys.ready, "d") == 4 * SEQ_SPAN + int(job["seq"])


@pytest.mark.parametrize("state", ["active", "completed", "failed"])
def test_a_job_that_has_started_is_left_alone(q: Proto, state: str) -> None:
    q.put("a", state)
    before = q.snapshot("a")
    assert q.reprioritize("a", 0) == 0
    assert q.snapshot("a") == before


def test_a_missing_job_changes_nothing(q: Proto) -> None:
    q.enqueue("other")
    before = q.snapshot("nope", "other")
    assert q.reprioritize("nope", 0) == 0
    assert q.snapshot("nope", "other") == before
    assert q.r.exists(q.keys.job("nope")) == 0


def test_a_blocked_twin_is_not_reprioritized(q: Proto) -> None:
    q.start("s", token="t", priority=5)
    q.enqueue("s", priority=5)
    before = q.snapshot("s")
    assert q.reprioritize("s", 0) == 0
    assert q.snapshot("s") == before

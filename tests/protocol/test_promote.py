"""promote.lua: a delayed job runs now, at its place in the ready order."""

from __future__ import annotations

import pytest

from conveyor.protocol import ops

from .harness import SEQ_SPAN, Proto


def _limits(q: Proto, what: str, **kwargs: object) -> None:
    assert q.run(ops.limits(q.keys, what, **kwargs)) == 1  # type: ignore[arg-type]


def test_a_delayed_job_becomes_waiting_now_keeping_its_seq(q: Proto) -> None:
    q.enqueue("d", delay=60, priority=5)
    q.enqueue("w", priority=5)
    seq = q.job("d")["seq"]
    q.clear_marker()
    before = q.now()
    assert q.promote("d") == 1
    job = q.job("d")
    assert (job["state"], job["seq"], job["priority"]) == ("waiting", seq, "5")
    assert before <= int(job["run_at"]) <= q.now()
    assert q.members(q.keys.scheduled) == []
    # enqueued first, so it goes ahead of the job that was waiting already
    assert q.members(q.keys.ready) == ["d", "w"]
    assert q.score(q.keys.ready, "d") == 5 * SEQ_SPAN + int(seq)
    assert q.marker_set()
    assert q.events("promoted") == [{"event": "promoted", "id": "d"}]
    assert q.claimed_ids() == ["d"]


def test_a_grouped_job_waits_in_its_group_and_the_group_joins_the_rotation(q: Proto) -> None:
    q.enqueue("d", delay=60, group="g")
    assert q.members(q.keys.groups) == []
    assert q.promote("d") == 1
    assert q.score(q.keys.group_ready("g"), "d") == q.ready_score("d")
    assert q.members(q.keys.ready) == []
    assert q.members(q.keys.groups) == ["g"]
    assert q.claimed_ids() == ["d"]


def test_a_job_of_a_paused_group_is_promoted_but_the_group_stays_held(q: Proto) -> None:
    _limits(q, "pause_group", group="g")
    q.enqueue("d", delay=60, group="g")
    assert q.promote("d") == 1
    assert q.job("d")["state"] == "waiting"
    assert q.members(q.keys.group_ready("g")) == ["d"]
    assert q.members(q.keys.groups) == []
    assert q.members(q.keys.gwait) == ["g"]
    assert q.claimed_ids() == []


@pytest.mark.parametrize("state", ["waiting", "active", "completed", "failed"])
def test_a_job_that_is_not_delayed_is_left_alone(q: Proto, state: str) -> None:
    q.put("a", state)
    before = q.snapshot("a")
    q.clear_marker()
    assert q.promote("a") == 0
    assert q.snapshot("a") == before
    assert not q.marker_set()


def test_a_missing_job_changes_nothing(q: Proto) -> None:
    before = q.snapshot("nope")
    assert q.promote("nope") == 0
    assert q.snapshot("nope") == before
    assert q.r.exists(q.keys.events, q.keys.marker, q.keys.job("nope")) == 0


def test_a_blocked_twin_is_not_promoted(q: Proto) -> None:
    q.start("s", token="t")
    q.enqueue("s", delay=60)
    before = q.snapshot("s")
    assert q.promote("s") == 0
    assert q.snapshot("s") == before

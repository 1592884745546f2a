"""cancel.lua: removing jobs that have not started, and blocked twins."""

from __future__ import annotations

from .harness import Proto


def test_a_waiting_job_is_removed(q: Proto) -> None:
    q.enqueue("a")
    q.enqueue("b")
    assert q.cancel("a") == 1
    assert q.r.exists(q.keys.job("a")) == 0
    assert q.members(q.keys.ready) == ["b"]
    assert q.events("cancelled") == [{"event": "cancelled", "id": "a"}]


def test_a_delayed_job_is_removed(q: Proto) -> None:
    q.enqueue("d", delay=30)
    assert q.cancel("d") == 1
    assert q.r.exists(q.keys.job("d")) == 0
    assert q.members(q.keys.scheduled) == []
    assert q.events("cancelled") == [{"event": "cancelled", "id": "d"}]


def test_a_running_job_is_not_cancelled(q: Proto) -> None:
    q.start("a", token="t")
    before = q.snapshot("a")
    assert q.cancel("a") == 0
    assert q.snapshot("a") == before
    assert q.complete_one("a", "t")  # its lease is intact


def test_a_running_job_loses_its_blocked_twin_only(q: Proto) -> None:
    q.start("s", token="t")
    running = q.job("s")
    q.enqueue("s", data=2)
    assert q.cancel("s") == 1
    assert q.r.exists(q.keys.blocked_job("s")) == 0
    assert q.members(q.keys.blocked) == []
    assert q.job("s") == running
    assert q.events("cancelled") == [{"event": "cancelled", "id": "s"}]
    q.complete_one("s", "t")
    assert q.job("s")["state"] == "completed"  # nothing left to release


def test_a_finished_job_is_kept(q: Proto) -> None:
    q.start("a", token="t")
    q.complete_one("a", "t")
    before = q.snapshot("a")
    assert q.cancel("a") == 0
    assert q.snapshot("a") == before


def test_a_missing_job_changes_nothing(q: Proto) -> None:
    before = q.snapshot()
    assert q.cancel("nope") == 0
    assert q.snapshot() == before
    assert q.r.exists(q.keys.events) == 0

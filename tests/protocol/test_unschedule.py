"""unschedule.lua: removing a repeatable job and its pending job if it has not started."""

from __future__ import annotations

from .harness import Proto


def test_removes_the_schedule_and_its_delayed_pending_job(q: Proto) -> None:
    tick = q.now() + 60_000
    q.schedule("s", tick, every_ms=1_000)
    q.schedule("other", tick, every_ms=1_000)
    kept = (q.schedule_hash("other"), q.job(f"other@{tick}"))
    events = q.r.xlen(q.keys.events)
    assert q.unschedule("s") == 1
    assert q.r.exists(q.keys.schedule("s"), q.keys.job(f"s@{tick}")) == 0
    assert q.members(q.keys.schedules) == ["other"]
    assert q.members(q.keys.scheduled) == [f"other@{tick}"]
    assert (q.schedule_hash("other"), q.job(f"other@{tick}")) == kept
    assert q.r.xlen(q.keys.events) == events  # no event


def test_a_waiting_grouped_pending_job_leaves_its_group(q: Proto) -> None:
    due = q.now() - 1_000
    q.schedule("s", due, every_ms=1_000, group="g")
    q.schedule("u", due + 1, every_ms=1_000)
    assert q.members(q.keys.group_ready("g")) == [f"s@{due}"]
    assert q.unschedule("s") == 1
    assert q.unschedule("u") == 1
    assert q.members(q.keys.group_ready("g")) == []
    assert q.members(q.keys.ready) == []
    assert q.r.exists(q.keys.job(f"s@{due}"), q.keys.job(f"u@{due + 1}")) == 0
    assert q.claimed_ids(5) == []


def test_a_running_pending_job_finishes_and_no_next_tick_follows(q: Proto) -> None:
    fired = q.now() - 1_000
    q.schedule("s", fired, every_ms=1_000)
    q.claim(token="t")
    running = q.job(f"s@{fired}")
    assert q.unschedule("s") == 1
    assert q.job(f"s@{fired}") == running
    assert q.members(q.keys.active) == [f"s@{fired}"]
    assert q.r.exists(q.keys.schedule("s")) == 0
    assert q.members(q.keys.schedules) == []
    # its worker's schedule_next finds no schedule
    assert q.schedule_next("s", fired, fired + 1_000) == 0
    assert q.r.exists(q.keys.schedule("s"), q.keys.job(f"s@{fired + 1_000}")) == 0
    assert q.complete_one(f"s@{fired}", "t")


def test_a_finished_pending_job_is_kept(q: Proto) -> None:
    fired = q.now() - 1_000
    q.schedule("s", fired, every_ms=1_000)
    q.claim(token="t")
    assert q.complete_one(f"s@{fired}", "t")
    assert q.unschedule("s") == 1
    assert q.job(f"s@{fired}")["state"] == "completed"
    assert q.members(q.keys.completed) == [f"s@{fired}"]


def test_a_missing_schedule_changes_nothing(q: Proto) -> None:
    tick = q.now() + 60_000
    q.schedule("s", tick, every_ms=1_000)
    assert q.unschedule("s") == 1
    before = q.snapshot(f"s@{tick}")
    assert q.unschedule("s") == 0
    assert q.unschedule("never") == 0
    assert q.snapshot(f"s@{tick}") == before
    assert q.r.exists(q.keys.schedules) == 0

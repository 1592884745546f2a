"""schedule_next.lua: compare-and-set on a schedule's `next`, queueing the next tick's job."""

from __future__ import annotations

from typing import Any

from .harness import HALF, Proto


def fired_tick(q: Proto, sid: str = "s", **template: Any) -> int:
    """A schedule whose first tick is due, its job claimed (token `t`): the fired tick."""
    fired = q.now() - 1_000
    q.schedule(sid, fired, every_ms=60_000, **template)
    (claimed,) = q.claim(token="t").jobs
    assert (claimed.id, claimed.schedule) == (f"{sid}@{fired}", sid)
    return fired


def state(q: Proto, sid: str, *job_ids: str) -> dict[str, Any]:
    """Everything a refused call must leave alone."""
    return {
        **q.snapshot(*job_ids),
        "schedule": q.schedule_hash(sid),
        "schedules": q.r.zrange(q.keys.schedules, 0, -1, withscores=True),
        "meta": q.r.hgetall(q.keys.meta),
    }


def test_queues_the_next_tick_and_moves_the_schedule_to_it(q: Proto) -> None:
    fired = fired_tick(q, task="send", data={"n": 1}, priority=3, group="g")
    running = q.job(f"s@{fired}")
    following = q.now() + 60_000
    q.clear_marker()
    before = q.now()
    assert q.schedule_next("s", fired, following) == 1
    job = q.job(f"s@{following}")
    created = int(job.pop("created_at"))
    assert before <= created <= q.now()
    assert job == {
        "state": "delayed", "task": "send", "data": '{"n":1}', "priority": "3",
        "seq": str(HALF + 2), "attempts": "0", "failures": "0", "stalls": "0",
        "max_failures": running["max_failures"], "max_stalls": running["max_stalls"],
        "min_backoff": running["min_backoff"], "max_backoff": running["max_backoff"],
        "timeout": running["timeout"], "result_ttl": running["result_ttl"], "group": "g",
        "run_at": str(following), "schedule": "s",
    }  # fmt: skip
    assert q.score(q.keys.scheduled, f"s@{following}") == following
    stored = q.schedule_hash("s")
    assert (stored["next"], stored["job"]) == (str(following), f"s@{following}")
    assert q.score(q.keys.schedules, "s") == following
    assert q.marker_set()
    assert q.events("created")[-1] == {
        "event": "created", "id": f"s@{following}", "state": "delayed",
    }  # fmt: skip
    assert q.job(f"s@{fired}") == running  # the fired tick's run goes on
    assert q.members(q.keys.active) == [f"s@{fired}"]


def test_a_next_tick_already_due_is_waiting(q: Proto) -> None:
    fired = fired_tick(q)
    following = q.now() - 1
    assert q.schedule_next("s", fired, following) == 1
    assert q.job(f"s@{following}")["state"] == "waiting"
    assert q.members(q.keys.ready) == [f"s@{following}"]
    assert q.members(q.keys.scheduled) == []


def test_the_next_job_follows_the_current_template(q: Proto) -> None:
    fired = fired_tick(q, data=1)
    q.r.hset(q.keys.schedule("s"), "data", "2")
    following = q.now() + 60_000
    assert q.schedule_next("s", fired, following) == 1
    assert q.job(f"s@{following}")["data"] == "2"


def test_a_fired_tick_that_is_no_longer_next_changes_nothing(q: Proto) -> None:
    fired = fired_tick(q)
    following = q.now() + 60_000
    assert q.schedule_next("s", fired, following) == 1
    before = state(q, "s", f"s@{fired}", f"s@{following}")
    assert q.schedule_next("s", fired, following + 60_000) == 0  # a late duplicate
    assert q.schedule_next("s", following + 1, following + 60_000) == 0  # never the next
    assert state(q, "s", f"s@{fired}", f"s@{following}") == before
    assert q.r.exists(q.keys.job(f"s@{following + 60_000}")) == 0


def test_a_schedule_that_is_gone_changes_nothing(q: Proto) -> None:
    fired = fired_tick(q)
    assert q.unschedule("s") == 1
    before = state(q, "s", f"s@{fired}")
    following = q.now() + 60_000
    assert q.schedule_next("s", fired, following) == 0
    assert state(q, "s", f"s@{fired}") == before
    assert q.r.exists(q.keys.schedule("s"), q.keys.job(f"s@{following}")) == 0
    assert q.members(q.keys.schedules) == []


def test_a_missing_schedule_writes_nothing(q: Proto) -> None:
    assert q.schedule_next("nope", 1_000, 2_000) == 0
    assert q.r.keys(q.keys.base + "*") == []


def test_racing_calls_for_one_fired_tick_create_exactly_one_job(q: Proto) -> None:
    fired = fired_tick(q)
    now = q.now()
    first, second = now + 60_000, now + 60_001  # two workers, a millisecond apart
    replies = q.runner.run_many(
        [q.schedule_next_call("s", fired, first), q.schedule_next_call("s", fired, second)]
    )
    assert [int(r) for r in replies] == [1, 0]
    assert q.members(q.keys.scheduled) == [f"s@{first}"]
    assert q.r.exists(q.keys.job(f"s@{second}")) == 0
    assert q.schedule_hash("s")["next"] == str(first)
    assert len(q.events("created")) == 2  # the fired tick's job and the next one


def test_each_tick_yields_one_job_down_the_chain(q: Proto) -> None:
    fired = fired_tick(q)  # a second ago: the next ticks below are due at once
    ticks = [fired]
    for step in (1, 2, 3):
        following = fired + step
        assert q.schedule_next("s", ticks[-1], following) == 1
        assert q.schedule_next("s", ticks[-1], following + 1_000) == 0  # a second worker
        ticks.append(following)
        (claimed,) = q.claim(token="t").jobs
        assert (claimed.id, claimed.schedule) == (f"s@{following}", "s")
    assert [e["id"] for e in q.events("created")] == [f"s@{t}" for t in ticks]
    assert q.members(q.keys.active) == [f"s@{t}" for t in ticks]


def test_a_next_tick_whose_job_already_ran_is_refused(q: Proto) -> None:
    tick = q.now() + 60_000
    q.schedule("s", tick, every_ms=1_000)
    q.promote(f"s@{tick}")
    q.claim(token="t")
    q.complete_one(f"s@{tick}", "t")
    q.r.hset(q.keys.schedule("s"), "next", tick - 1_000)  # as if tick - 1 s were pending
    before = q.schedule_hash("s")
    assert q.schedule_next("s", tick - 1_000, tick) == -1  # that tick's job already ran
    assert q.schedule_hash("s") == before
    assert q.schedule_next("s", tick - 1_000, tick + 1_000) == 1
    assert q.schedule_hash("s")["job"] == f"s@{tick + 1_000}"

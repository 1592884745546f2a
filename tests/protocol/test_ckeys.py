"""Concurrency keys (include/ckeys.lua in claim, finish and limits; protocol
§16.5) and a group's max_waiting (enqueue.lua)."""

from __future__ import annotations

import time

from conveyor.protocol import ops

from .harness import Proto


def _limits(q: Proto, what: str, **kwargs: object) -> None:
    assert q.run(ops.limits(q.keys, what, **kwargs)) == 1  # type: ignore[arg-type]


def _enqueue(q: Proto, job_id: str, ckeys: str, **options: object) -> str:
    spec = q.spec(job_id, **options)
    spec.extra = (f"ckeys={ckeys}",)
    return q.enqueue_specs([spec])[0].outcome


def test_each_key_caps_its_running_jobs_and_others_go_on(q: Proto) -> None:
    _limits(q, "key", group="tenant-1", concurrency=1)
    _limits(q, "key", group="cust-9", concurrency=2)
    _enqueue(q, "a", "tenant-1,cust-9")
    _enqueue(q, "b", "tenant-1")  # held back by tenant-1
    _enqueue(q, "c", "cust-9")
    _enqueue(q, "d", "cust-9")  # held back by cust-9 (a and c run)
    q.enqueue("e")
    ready_b = q.score(q.keys.ready, "b")
    assert q.claimed_ids(5, token="t") == ["a", "c", "e"]
    assert q.r.hgetall(q.keys.base + "kactive") == {b"tenant-1": b"1", b"cust-9": b"2"}
    assert q.members(q.keys.base + "kwait:tenant-1") == ["b"]
    assert q.members(q.keys.base + "kwait:cust-9") == ["d"]
    assert q.score(q.keys.base + "kwait:tenant-1", "b") == ready_b  # parked with its ready score
    assert q.members(q.keys.ready) == []
    assert q.job("b")["state"] == "waiting"
    assert q.r.zcard(q.keys.base + "parked") == 2
    q.clear_marker()
    assert q.complete_one("a", "t")  # frees tenant-1 and cust-9: b and d come back
    assert q.marker_set()
    assert q.members(q.keys.ready) == ["b", "d"]
    assert q.claimed_ids(5, token="t2") == ["b", "d"]
    assert q.r.hgetall(q.keys.base + "kactive") == {b"tenant-1": b"1", b"cust-9": b"2"}


def test_a_key_rate_parks_until_it_frees_up(q: Proto) -> None:
    _limits(q, "key", group="api", rate=1, window_ms=200)
    _enqueue(q, "a", "api")
    _enqueue(q, "b", "api")
    first = q.claim(2)
    assert [j.id for j in first.jobs] == ["a"]
    assert q.score(q.keys.base + "kheld", "api") == first.now_ms + 200
    again = q.claim(2)
    assert again.jobs == [] and again.next_due_ms == first.now_ms + 200
    time.sleep(max(0.0, (first.now_ms + 200 - q.now()) / 1000) + 0.02)
    assert q.claimed_ids(2) == ["b"]


def test_changing_a_keys_limits_brings_its_parked_jobs_back(q: Proto) -> None:
    _limits(q, "key", group="k", concurrency=1)
    _enqueue(q, "a", "k")
    _enqueue(q, "b", "k")
    assert q.claimed_ids(2) == ["a"]
    _limits(q, "key", group="k", concurrency=2)
    assert q.claimed_ids(2) == ["b"]


def test_a_cancelled_parked_job_is_dropped(q: Proto) -> None:
    _limits(q, "key", group="k", concurrency=1)
    _enqueue(q, "a", "k")
    _enqueue(q, "b", "k")
    assert q.claimed_ids(2, token="t") == ["a"]
    assert q.cancel("b") == 1
    assert q.complete_one("a", "t")
    assert q.members(q.keys.ready) == [] and q.r.zcard(q.keys.base + "parked") == 0
    assert q.r.hgetall(q.keys.base + "kactive") == {}


def test_a_stalled_or_failed_run_frees_its_keys(q: Proto) -> None:
    _limits(q, "key", group="k", concurrency=1)
    _enqueue(q, "a", "k", max_failures=1)
    assert q.claimed_ids(token="t") == ["a"]
    assert q.fail("a", "t") == "failed"
    assert q.r.hgetall(q.keys.base + "kactive") == {}


def test_a_group_at_max_waiting_refuses_new_jobs(q: Proto) -> None:
    _limits(q, "group", group="g", max_waiting=2)
    assert [q.enqueue(f"g{i}", group="g").outcome for i in range(3)] == [
        "created", "created", "refused",
    ]  # fmt: skip
    assert q.job("g2") == {}
    assert q.enqueue("h1", group="h").outcome == "created"
    assert q.enqueue("g0", group="g", data=5).outcome == "updated"  # an upsert is no new job
    assert q.claimed_ids() == ["g0"]
    assert q.enqueue("g3", group="g").outcome == "created"
    _limits(q, "group", group="g")  # no cap any more
    assert q.enqueue("g4", group="g").outcome == "created"


def test_the_default_max_waiting_of_every_group(q: Proto) -> None:
    _limits(q, "group", group="", max_waiting=1)
    assert q.enqueue("a1", group="a").outcome == "created"
    assert q.enqueue("a2", group="a").outcome == "refused"
    assert q.enqueue("b1", group="b").outcome == "created"

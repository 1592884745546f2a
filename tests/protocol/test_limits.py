"""limits.lua and the claim-time limits: queue and group caps, rate windows,
round robin between groups, pausing a group."""

from __future__ import annotations

import time

from conveyor.protocol import ops

from .harness import Proto


def _limits(q: Proto, what: str, **kwargs: object) -> None:
    assert q.run(ops.limits(q.keys, what, **kwargs)) == 1  # type: ignore[arg-type]


def test_groups_are_served_round_robin_with_ungrouped_jobs_as_one_group(q: Proto) -> None:
    for job_id in ("a1", "a2", "a3"):
        q.enqueue(job_id, group="a")
    q.enqueue("b1", group="b")
    q.enqueue("u1")
    q.enqueue("u2")
    assert q.claimed_ids(6) == ["u1", "a1", "b1", "u2", "a2", "a3"]
    assert q.members(q.keys.groups) == []


def test_a_noisy_group_does_not_starve_the_others(q: Proto) -> None:
    q.enqueue_specs([q.spec(f"n{i}", group="noisy") for i in range(200)])
    for g in range(5):
        q.enqueue(f"q{g}", group=f"quiet{g}")
    first = q.claimed_ids(6)
    assert sorted(first) == ["n0", "q0", "q1", "q2", "q3", "q4"]


def test_queue_concurrency_cap(q: Proto) -> None:
    _limits(q, "queue", concurrency=2)
    for job_id in "abcde":
        q.enqueue(job_id)
    assert q.claimed_ids(5) == ["a", "b"]
    assert q.claimed_ids(5) == []
    q.clear_marker()
    q.complete_one("a")
    assert q.marker_set()  # a freed slot wakes a worker
    assert q.claimed_ids(5) == ["c"]
    _limits(q, "queue")  # no limits
    assert q.claimed_ids(5) == ["d", "e"]


def test_queue_rate_limit_holds_for_a_window_after_the_leases(q: Proto) -> None:
    _limits(q, "queue", rate=3, window_ms=200)
    for job_id in "abcde":
        q.enqueue(job_id)
    reply = q.claim(5)
    assert [j.id for j in reply.jobs] == ["a", "b", "c"]
    frees = reply.now_ms + 200  # a sliding window: 200 ms after the leases
    again = q.claim(5)
    if again.now_ms < frees:
        assert again.jobs == [] and again.next_due_ms == frees
    time.sleep(max(0.0, (frees - q.now()) / 1000) + 0.01)
    assert q.claimed_ids(5)[:2] == ["d", "e"]


def test_group_concurrency_holds_the_group_until_a_run_ends(q: Proto) -> None:
    _limits(q, "group", group="g", concurrency=1)
    for job_id in ("g1", "g2"):
        q.enqueue(job_id, group="g")
    q.enqueue("h1", group="h")
    assert sorted(q.claimed_ids(3)) == ["g1", "h1"]
    assert q.members(q.keys.gwait) == ["g"]
    assert q.claimed_ids(3) == []
    q.complete_one("g1")
    assert q.members(q.keys.gwait) == []
    assert q.claimed_ids(3) == ["g2"]
    assert q.r.hget(q.keys.gactive, "g") == b"1"


def test_group_defaults_apply_to_every_group(q: Proto) -> None:
    _limits(q, "group", concurrency=1)  # group '' = the defaults
    for job_id in ("a1", "a2", "b1", "b2"):
        q.enqueue(job_id, group=job_id[0])
    assert sorted(q.claimed_ids(4)) == ["a1", "b1"]
    q.fail("a1", permanent=True)
    assert q.claimed_ids(4) == ["a2"]


def test_group_rate_limit(q: Proto) -> None:
    _limits(q, "group", group="g", rate=2, window_ms=60_000)
    for i in range(4):
        q.enqueue(f"g{i}", group="g")
    reply = q.claim(4)
    assert [j.id for j in reply.jobs] == ["g0", "g1"]
    assert q.claimed_ids(4) == []
    assert reply.next_due_ms is not None or q.claim(4).next_due_ms is not None


def test_a_paused_group_is_skipped_and_resumes(q: Proto) -> None:
    _limits(q, "pause_group", group="g")
    q.enqueue("g1", group="g")
    q.enqueue("h1", group="h")
    assert q.claimed_ids(5) == ["h1"]
    assert q.claimed_ids(5) == []
    q.clear_marker()
    _limits(q, "resume_group", group="g")
    assert q.marker_set()
    assert q.claimed_ids(5) == ["g1"]


def test_a_held_group_whose_run_ends_stays_paused(q: Proto) -> None:
    _limits(q, "group", group="g", concurrency=1)
    q.enqueue("g1", group="g")
    q.enqueue("g2", group="g")
    assert q.claimed_ids(2) == ["g1"]
    _limits(q, "pause_group", group="g")
    q.complete_one("g1")
    assert q.claimed_ids(2) == []


def test_cancel_and_upsert_find_grouped_jobs(q: Proto) -> None:
    q.enqueue("g1", group="g")
    q.enqueue("g1", group="g", delay=60)
    assert q.members(q.keys.group_ready("g")) == []
    assert q.members(q.keys.scheduled) == ["g1"]
    q.enqueue("g2", group="g")
    assert q.cancel("g2") == 1
    assert q.members(q.keys.group_ready("g")) == []

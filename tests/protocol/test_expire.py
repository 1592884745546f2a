"""Expire if not started (protocol §16.2): enqueue.lua stores `expires_at`
from `expire_in`; claim.lua fails a job past it instead of leasing it."""

from __future__ import annotations

import time

from .harness import Proto


def _enqueue_expiring(q: Proto, job_id: str, expire_in_ms: int, **options: object) -> None:
    spec = q.spec(job_id, **options)
    spec.extra = (f"expire_in={expire_in_ms}",)
    assert q.enqueue_specs([spec])[0].outcome == "created"


def test_the_deadline_is_stored_at_creation(q: Proto) -> None:
    before = q.now()
    _enqueue_expiring(q, "a", 5_000)
    deadline = int(q.job("a")["expires_at"])
    assert before + 5_000 <= deadline <= q.now() + 5_000


def test_a_job_claimed_before_its_deadline_runs(q: Proto) -> None:
    _enqueue_expiring(q, "a", 60_000)
    assert q.claimed_ids() == ["a"]
    assert q.job("a")["state"] == "active"


def test_a_job_past_its_deadline_fails_unrun_and_the_next_is_leased(q: Proto) -> None:
    _enqueue_expiring(q, "late", 30, result_ttl=5)
    q.enqueue("b")
    q.await_job("late")  # a waiter, told of the failure
    time.sleep(0.05)
    now = q.now()
    assert q.claimed_ids(2) == ["b"]
    job = q.job("late")
    assert job["state"] == "failed"
    deadline = job["expires_at"]
    expected = f"JobExpiredError: not started by its deadline (expires_at {deadline} ms)"
    assert job["error"] == expected
    assert (job["attempts"], "token" in job) == ("0", False)  # never leased, never run
    assert now <= int(job["finished_at"]) <= q.now()
    assert q.score(q.keys.failed, "late") == int(job["finished_at"]) + 5_000
    assert q.members(q.keys.active) == ["b"]
    failed = q.events("failed")
    assert failed == [{"event": "failed", "id": "late", "error": job["error"], "expired": "1"}]
    assert q.r.lrange(q.keys.done("late"), 0, -1) == [b"failed\n" + job["error"].encode()]


def test_an_expired_job_does_not_leave_ready_jobs_unannounced(q: Proto) -> None:
    _enqueue_expiring(q, "late", 1)
    q.enqueue("b")
    time.sleep(0.01)
    q.clear_marker()
    assert q.claimed_ids(1) == []  # the turn went to the expired job
    assert q.members(q.keys.ready) == ["b"]
    assert q.marker_set()  # another claim is due at once

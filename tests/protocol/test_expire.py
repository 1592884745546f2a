"""Expire if not started (protocol §16.2): enqueue.lua stores `expires_at`
from `expire_in`; claim.lua returns it with the job (the worker fails a job
claimed at or past it without running it)."""

from __future__ import annotations

from .harness import Proto


def _enqueue_expiring(q: Proto, job_id: str, expire_in_ms: int, **options: object) -> None:
    spec = q.spec(job_id, **options)
    spec.extra = (f"expire_in={expire_in_ms}",)
    assert q.enqueue_specs([spec])[0].outcome == "created"


def test_the_deadline_is_stored_at_creation_and_returned_by_claim(q: Proto) -> None:
    before = q.now()
    _enqueue_expiring(q, "a", 5_000)
    deadline = int(q.job("a")["expires_at"])
    assert before + 5_000 <= deadline <= q.now() + 5_000
    reply = q.claim()
    (job,) = reply.jobs
    assert job.expires_at_ms == deadline and reply.now_ms < deadline


def test_a_job_without_a_deadline_has_none(q: Proto) -> None:
    q.enqueue("a")
    (job,) = q.claim().jobs
    assert job.expires_at_ms is None


def test_an_upsert_does_not_move_the_deadline(q: Proto) -> None:
    _enqueue_expiring(q, "a", 5_000)
    deadline = q.job("a")["expires_at"]
    again = q.spec("a", data=2)
    again.extra = ("expire_in=60000",)
    assert q.enqueue_specs([again])[0].outcome == "updated"
    assert q.job("a")["expires_at"] == deadline

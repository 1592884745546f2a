"""Resumable jobs (protocol §16.7): checkpoint.lua saves a running job's
state, claim returns it, defer.lua moves a job back without an attempt."""

from __future__ import annotations

from conveyor.protocol import ops

from .harness import MAXLEN, Proto


def _checkpoint(q: Proto, job_id: str, token: str, state: str) -> int:
    return int(q.run(ops.checkpoint(q.keys, job_id=job_id, token=token, state=state)))


def _defer(q: Proto, job_id: str, token: str, delay_ms: int, state: str = "") -> list[int]:
    call = ops.defer(q.keys, [(job_id, token, delay_ms, state)], events_maxlen=MAXLEN)
    return [int(x) for x in q.run(call)]


def test_a_checkpoint_is_fenced_and_comes_back_with_the_next_claim(q: Proto) -> None:
    q.start("a", token="t1")
    assert q.claim().jobs == []
    assert _checkpoint(q, "a", "t1", '{"next":500}') == 1
    assert _checkpoint(q, "a", "stale", '{"next":9}') == 0
    assert q.job("a")["checkpoint"] == '{"next":500}'
    assert q.fail("a", "t1", retry_delay_ms=0) == "retried"
    (job,) = q.claim(token="t2").jobs
    assert (job.id, job.checkpoint, job.attempts) == ("a", b'{"next":500}', 2)


def test_a_first_claim_has_no_checkpoint(q: Proto) -> None:
    q.enqueue("a")
    (job,) = q.claim().jobs
    assert job.checkpoint is None


def test_defer_moves_the_job_back_without_an_attempt(q: Proto) -> None:
    q.start("a", token="t1")
    before = q.now()
    assert _defer(q, "a", "t1", 60_000, '{"next":7}') == [1]
    job = q.job("a")
    assert (job["state"], job["attempts"], job["failures"], job["stalls"]) == (
        "delayed", "0", "0", "0",
    )  # fmt: skip
    assert job["checkpoint"] == '{"next":7}'
    due = q.score(q.keys.scheduled, "a")
    assert due is not None and before + 60_000 <= due <= q.now() + 60_000
    assert q.members(q.keys.active) == []
    (event,) = q.events("deferred")
    assert event["id"] == "a" and int(event["delay_ms"]) in range(59_990, 60_001)
    assert _defer(q, "a", "t1", 0) == [0]  # no longer active: refused


def test_defer_with_no_delay_goes_back_to_its_place_keeping_the_checkpoint(q: Proto) -> None:
    q.start("a", token="t1")
    score = q.ready_score("a")
    q.enqueue("b")
    assert _checkpoint(q, "a", "t1", '{"next":3}') == 1
    assert _defer(q, "a", "t1", 0) == [1]
    assert q.members(q.keys.ready) == ["a", "b"] and q.score(q.keys.ready, "a") == score
    assert q.job("a")["checkpoint"] == '{"next":3}'

"""suspect.lua: an operator releases a suspect (it runs as any job) or fails a waiting one."""

from __future__ import annotations

import time

from conveyor.protocol import ops

from .harness import MAXLEN, Proto


def _suspect(q: Proto, job_id: str, stalls: int = 1, **options: object) -> None:
    q.enqueue(job_id, **options)
    q.r.hset(q.keys.job(job_id), "stalls", stalls)


def _act(q: Proto, job_id: str, action: str) -> str:
    return ops.text(q.run(ops.suspect(q.keys, job_id, action, events_maxlen=MAXLEN)))


def test_a_released_suspect_is_claimed_as_any_job_and_reported_with_no_stalls(q: Proto) -> None:
    _suspect(q, "s", stalls=2)
    q.enqueue("a")
    assert q.claimed_ids(5, isolates=True, alone=False) == ["a"]  # stepped over
    assert _act(q, "s", "release") == "released"
    assert q.job("s")["trusted"] == "1"
    assert q.events("trusted") == [{"event": "trusted", "id": "s", "stalls": "2"}]
    (job,) = q.claim(5, isolates=True, alone=False).jobs
    assert (job.id, job.stalls) == ("s", 0)  # its worker runs it as any other job
    assert q.job("s")["stalls"] == "2"  # the record keeps its history


def test_releasing_a_waiting_suspect_wakes_a_worker_and_a_delayed_one_does_not(
    q: Proto,
) -> None:
    _suspect(q, "s")
    _suspect(q, "later", delay=60)
    q.r.delete(q.keys.marker)  # as a worker that stepped over it left it: idle, blocked
    assert _act(q, "later", "release") == "released"
    assert q.r.zcard(q.keys.marker) == 0  # not due: promote wakes a worker when it is
    assert _act(q, "s", "release") == "released"
    assert q.r.zcard(q.keys.marker) == 1  # claimable now: a blocked worker claims it at once


def test_a_released_suspect_that_stalls_again_is_a_suspect_again(q: Proto) -> None:
    _suspect(q, "s")
    assert _act(q, "s", "release") == "released"
    q.claim(1, lease_ms=40)
    time.sleep(0.06)
    q.reap()
    assert "trusted" not in q.stored("s")
    assert q.claimed_ids(5, isolates=True, alone=False) == []
    assert q.claimed_ids(5, isolates=True) == ["s"]


def test_failing_a_waiting_suspect_ends_it_unrun_and_kept_as_failed(q: Proto) -> None:
    _suspect(q, "s", stalls=1, group="g")
    assert _act(q, "s", "fail") == "failed"
    job = q.job("s")
    assert job["state"] == "failed"
    assert job["error"].startswith("SuspectFailedError: failed by an operator, unrun")
    assert q.members(q.keys.group_ready("g")) == []
    assert q.members(q.keys.failed) == ["s"]
    assert [e["id"] for e in q.events("failed")] == ["s"]


def test_a_running_suspect_is_not_failed_here(q: Proto) -> None:
    _suspect(q, "s")
    q.claim(1)
    before = q.stored("s")
    assert _act(q, "s", "fail") == "running"
    assert q.stored("s") == before


def test_what_is_not_a_suspect_is_refused_and_nothing_changes(q: Proto) -> None:
    q.enqueue("plain")
    _suspect(q, "done")
    q.r.hset(q.keys.job("done"), "state", "completed")
    _suspect(q, "s")
    assert _act(q, "s", "release") == "released"
    snapshot = {i: q.stored(i) for i in ("plain", "done", "s")}
    for job_id in ("plain", "done", "s"):
        for action in ("release", "fail"):
            assert _act(q, job_id, action) == "not_suspect"
    assert _act(q, "nope", "release") == "missing"
    assert _act(q, "s", "pardon") == "bad_action"
    assert {i: q.stored(i) for i in ("plain", "done", "s")} == snapshot

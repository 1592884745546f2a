"""reap.lua: expired leases back to ready (a stall), or failed at max_stalls."""

from __future__ import annotations

import time

from .harness import Proto

LEASE_MS = 40
PAST_LEASE = 0.06  # seconds: long enough for a LEASE_MS lease to run out


def test_an_expired_lease_goes_back_to_ready_at_its_old_place(q: Proto) -> None:
    q.start("a", token="t", lease_ms=LEASE_MS)
    q.enqueue("b")
    score = q.ready_score("a")
    q.clear_marker()
    time.sleep(PAST_LEASE)
    reply = q.reap()
    assert (reply.recovered, reply.failed, reply.next_deadline_ms) == (1, 0, None)
    job = q.job("a")
    assert (job["state"], job["stalls"], job["attempts"]) == ("waiting", "1", "1")
    assert q.progress("a", "t", 0.5) == 0  # the old lease holder is fenced off
    assert q.members(q.keys.active) == []
    assert q.members(q.keys.ready) == ["a", "b"]
    assert q.score(q.keys.ready, "a") == score
    assert q.marker_set()
    assert q.events("stalled") == [{"event": "stalled", "id": "a", "stalls": "1"}]


def test_the_old_worker_is_fenced_off_after_a_reap(q: Proto) -> None:
    q.start("a", token="old", lease_ms=LEASE_MS)
    time.sleep(PAST_LEASE)
    q.reap()
    assert q.heartbeat([("a", "old")]) == ["a"]
    assert q.progress("a", "old", 0.5) == 0
    assert q.complete(("a", "old", '"late"')) == [False]
    assert q.fail("a", "old") == "lost"
    assert q.release(("a", "old")) == [0]
    assert q.job("a")["state"] == "waiting"
    (job,) = q.claim(token="new").jobs
    assert (job.attempts, job.stalls) == (2, 1)


def test_a_live_lease_is_left_alone_and_reported_as_next_deadline(q: Proto) -> None:
    q.start("a", token="t", lease_ms=60_000)
    deadline = q.score(q.keys.active, "a")
    before = q.snapshot("a")
    reply = q.reap()
    assert (reply.recovered, reply.failed, reply.next_deadline_ms) == (0, 0, deadline)
    assert q.snapshot("a") == before


def test_max_stalls_fails_the_job(q: Proto) -> None:
    q.start("a", token="t", lease_ms=LEASE_MS, max_stalls=2, result_ttl=60)
    time.sleep(PAST_LEASE)
    assert q.reap().recovered == 1
    q.claim(token="t2", lease_ms=LEASE_MS)
    time.sleep(PAST_LEASE)
    reply = q.reap()
    assert (reply.recovered, reply.failed) == (0, 1)
    job = q.job("a")
    error = "StalledError: lease expired 2 time(s); the worker died or hung"
    assert (job["state"], job["stalls"], job["error"]) == ("failed", "2", error)
    assert q.progress("a", "t2", 0.5) == 0  # the old lease holder is fenced off
    finished = int(job["finished_at"])
    assert q.score(q.keys.failed, "a") == finished + 60_000
    assert 119_000 < q.ttl_ms(q.keys.job("a")) <= 120_000  # ttl + 60 s grace for the sweep
    assert q.members(q.keys.ready) == []
    assert q.events("failed") == [{"event": "failed", "id": "a", "error": error}]


def test_a_stalled_failure_tells_waiters_and_honours_result_ttl_zero(q: Proto) -> None:
    q.start("a", token="t", lease_ms=LEASE_MS, max_stalls=1, result_ttl=0)
    q.await_job("a")
    time.sleep(PAST_LEASE)
    assert q.reap().failed == 1
    assert q.r.exists(q.keys.job("a")) == 0
    assert q.members(q.keys.failed) == []
    [element] = q.r.lrange(q.keys.done("a"), 0, -1)
    assert element.startswith(b"failed\nStalledError: lease expired 1 time(s)")


def test_reap_handles_at_most_batch_leases(q: Proto) -> None:
    for job_id in ("a", "b", "c"):
        q.enqueue(job_id)
    q.claim(3, token="t", lease_ms=LEASE_MS)
    time.sleep(PAST_LEASE)
    first = q.reap(batch=2)
    assert (first.recovered, first.failed) == (2, 0)
    assert first.next_deadline_ms is not None  # c is still in `active`, past its deadline
    assert q.members(q.keys.active) == ["c"]
    second = q.reap(batch=2)
    assert (second.recovered, second.next_deadline_ms) == (1, None)
    assert q.members(q.keys.ready) == ["a", "b", "c"]


def test_a_stale_active_entry_is_dropped_without_counting(q: Proto) -> None:
    q.enqueue("w")
    q.r.zadd(q.keys.active, {"w": 1, "ghost": 1})
    before = q.job("w")
    reply = q.reap()
    assert (reply.recovered, reply.failed) == (0, 0)
    assert q.members(q.keys.active) == []
    assert q.job("w") == before
    assert q.r.exists(q.keys.job("ghost")) == 0
    assert q.events("stalled") == []


def test_a_stall_merges_a_blocked_twin(q: Proto) -> None:
    q.start("s", token="t", lease_ms=LEASE_MS, data=1)
    q.enqueue("s", data=2, reset_counts=False)
    time.sleep(PAST_LEASE)
    assert q.reap().recovered == 1
    job = q.job("s")
    assert (job["state"], job["data"], job["stalls"]) == ("waiting", "2", "1")
    assert q.r.exists(q.keys.blocked_job("s")) == 0
    assert q.members(q.keys.blocked) == []


def test_a_stall_honours_a_later_run_at_of_the_merged_twin(q: Proto) -> None:
    q.start("s", token="t", lease_ms=LEASE_MS)
    q.enqueue("s", delay=30)
    due = int(q.twin("s")["run_at"])
    time.sleep(PAST_LEASE)
    assert q.reap().recovered == 1
    assert q.job("s")["state"] == "delayed"
    assert q.score(q.keys.scheduled, "s") == due


def test_failing_for_good_releases_a_blocked_twin(q: Proto) -> None:
    q.start("s", token="t", lease_ms=LEASE_MS, max_stalls=1, data=1)
    q.enqueue("s", data=2)
    time.sleep(PAST_LEASE)
    assert q.reap().failed == 1
    job = q.job("s")
    assert (job["state"], job["data"], job["stalls"]) == ("waiting", "2", "1")  # still a suspect
    assert q.members(q.keys.ready) == ["s"]
    assert q.members(q.keys.failed) == []


def test_a_stalled_failure_sweeps_expired_failed_records(q: Proto) -> None:
    for i in range(3):
        q.r.hset(q.keys.job(f"old{i}"), "state", "failed")
        q.r.zadd(q.keys.failed, {f"old{i}": 1 + i})
    q.start("a", token="t", lease_ms=LEASE_MS, max_stalls=1)
    time.sleep(PAST_LEASE)
    assert q.reap(batch=1).failed == 1
    # 2 per job failed plus `batch` more: all three expired records are swept
    assert q.members(q.keys.failed) == ["a"]
    assert [q.r.exists(q.keys.job(f"old{i}")) for i in range(3)] == [0, 0, 0]


def _expired_records(q: Proto, index: str, count: int, prefix: str) -> None:
    """`count` ids in `index` whose retention ran out (their records already gone)."""
    q.r.zadd(index, {f"{prefix}{i}": 1 + i for i in range(count)})


def test_reap_says_more_while_a_sweep_leaves_expired_ids_behind(q: Proto) -> None:
    """O3b: a burst leaves more expired ids than one bounded sweep takes;
    `more` tells the reaper to call again until the indexes are clean."""
    _expired_records(q, q.keys.completed, 25, "c")
    _expired_records(q, q.keys.failed, 12, "f")
    q.r.zadd(q.keys.completed, {"live": q.now() + 60_000})
    calls = []
    while True:
        reply = q.reap(batch=1)  # sweeps up to 10 ids of each index per call
        calls.append(reply.more)
        if not reply.more:
            break
        assert len(calls) < 10
    assert calls == [True, True, False]
    assert q.members(q.keys.completed) == ["live"]
    assert q.members(q.keys.failed) == []


def test_reap_says_more_while_a_keep_cap_is_exceeded(q: Proto) -> None:
    q.r.hset(q.keys.meta, "keep_completed", 5)
    future = q.now() + 60_000
    q.r.zadd(q.keys.completed, {f"c{i}": future + i for i in range(18)})
    assert q.reap(batch=1).more  # 10 of the 13 surplus dropped
    assert not q.reap(batch=1).more
    assert q.members(q.keys.completed) == [f"c{i}" for i in range(13, 18)]


def test_reap_says_more_after_a_full_batch_of_expired_leases(q: Proto) -> None:
    for job_id in ("a", "b", "c"):
        q.start(job_id, token="t", lease_ms=LEASE_MS)
    time.sleep(PAST_LEASE)
    first = q.reap(batch=2)
    assert (first.recovered, first.more) == (2, True)
    second = q.reap(batch=2)
    assert (second.recovered, second.more) == (1, False)


def test_a_quiet_queue_needs_no_more_reaping(q: Proto) -> None:
    q.start("a", token="t", lease_ms=60_000)
    assert q.reap().more is False


# Defect 1 of issue 15: a re-enqueue (default reset_counts) of a job whose worker
# died must not erase its stall history, or a poison job is no longer isolated.
def test_a_merged_twin_keeps_the_stall_and_attempt_history(q: Proto) -> None:
    q.start("s", token="t", lease_ms=LEASE_MS, max_stalls=3, data=1)
    assert q.enqueue("s", data=2).outcome == "blocked"  # reset_counts on by default
    time.sleep(PAST_LEASE)
    assert q.reap().recovered == 1
    job = q.job("s")
    assert (job["data"], job["stalls"], job["attempts"]) == ("2", "1", "1")
    again = q.claim(token="t2", lease_ms=LEASE_MS).jobs
    assert [(j.id, j.attempts, j.stalls) for j in again] == [("s", 2, 1)]  # a visible re-run


def test_a_suspect_stays_isolated_after_a_re_enqueue(q: Proto) -> None:
    q.start("s", token="t", lease_ms=LEASE_MS)
    q.enqueue("s", data=2)
    q.enqueue("other")
    time.sleep(PAST_LEASE)
    q.reap()
    first = q.claim(4, token="t2")
    assert [j.id for j in first.jobs] == ["s"]  # alone: the neighbour is not claimed with it


def test_a_twin_taking_over_from_a_final_stall_stays_a_suspect(q: Proto) -> None:
    q.start("s", token="t", lease_ms=LEASE_MS, max_stalls=1, data=1)
    q.enqueue("s", data=2)
    q.enqueue("other")
    time.sleep(PAST_LEASE)
    assert q.reap().failed == 1
    job = q.job("s")
    assert (job["state"], job["data"], job["stalls"], job["attempts"]) == ("waiting", "2", "1", "1")
    assert [j.id for j in q.claim(4, token="t2").jobs] == ["s"]

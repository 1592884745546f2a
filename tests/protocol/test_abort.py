"""abort.lua: a job not started is cancelled; a running one is flagged, its
worker woken and told by every heartbeat until it ends the run itself."""

from __future__ import annotations

from conveyor.protocol import ops

from .harness import Proto


def test_a_waiting_job_is_cancelled_with_its_twin_gone_too(q: Proto) -> None:
    q.enqueue("a")
    q.enqueue("b")
    assert q.abort("a") == "cancelled"
    assert q.r.exists(q.keys.job("a")) == 0
    assert q.members(q.keys.ready) == ["b"]
    assert q.events("cancelled") == [{"event": "cancelled", "id": "a"}]


def test_a_delayed_job_is_cancelled(q: Proto) -> None:
    q.enqueue("d", delay=30)
    assert q.abort("d") == "cancelled"
    assert q.r.exists(q.keys.job("d")) == 0
    assert q.members(q.keys.scheduled) == []


def test_a_running_job_is_flagged_and_its_worker_woken_once_told(q: Proto) -> None:
    q.start("a", token="t")
    worker = q.job("a")["worker"]
    deadline = q.score(q.keys.active, "a")
    assert q.abort("a") == "aborting"
    assert q.abort("a") == "aborting"  # asked again: the same, one event
    record = q.job("a")
    assert (record["state"], record["token"], record["abort"]) == ("active", "t", "1")
    assert q.score(q.keys.active, "a") == deadline  # the lease is the worker's still
    wake = q.keys.wake(worker)
    assert q.members(wake) == ["abort=a"]
    assert 0 < q.ttl_ms(wake) <= 600_000
    assert q.events("abort_requested") == [
        {"event": "abort_requested", "id": "a", "worker": worker}
    ]
    assert q.complete_one("a", "t")  # a run that ends first simply ends: the race is decided


def test_the_heartbeat_renews_an_aborted_lease_and_reports_it_after_the_lost(q: Proto) -> None:
    q.enqueue("kept")
    q.enqueue("asked")
    q.claim(2, token="t")
    q.abort("asked")
    raw = q.heartbeat_raw([("kept", "t"), ("asked", "t"), ("gone", "t")], lease_ms=60_000)
    assert ops.split_heartbeat(raw) == (["gone"], ["asked"])
    assert ops.decode_heartbeat(raw) == ["gone"]
    assert q.score(q.keys.active, "asked") == int(raw[0]) + 60_000
    plain = q.heartbeat_raw([("kept", "t")])
    assert ops.split_heartbeat(plain) == ([], []) and len(plain) == 1


def test_the_worker_fails_it_for_good_and_waiters_are_told(q: Proto) -> None:
    q.start("a", token="t", max_failures=5)
    q.abort("a")
    q.await_job("a")  # a waiter
    assert q.fail("a", "t", error="AbortedError: aborted", permanent=True) == "failed"
    assert q.job("a")["state"] == "failed"
    assert q.r.lrange(q.keys.done("a"), 0, -1) == [b"failed\nAbortedError: aborted"]
    assert q.abort("a") == "finished"


def test_finished_missing_and_other_states_change_nothing(q: Proto) -> None:
    q.put("c", "completed")
    q.put("f", "failed")
    before = q.snapshot("c", "f")
    assert q.abort("c") == "finished"
    assert q.abort("f") == "finished"
    assert q.abort("nope") == "missing"
    assert q.snapshot("c", "f") == before
    q.r.hset(q.keys.job("p"), "state", "waiting_children")
    assert q.abort("p") == "refused"
    assert q.r.hgetall(q.keys.job("p")) == {b"state": b"waiting_children"}

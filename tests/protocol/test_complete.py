"""complete.lua: fenced success, retention, sweeping, waiters, singleton twins."""

from __future__ import annotations

from .harness import HALF, Proto


def test_complete_stores_the_result_and_retains_the_record(q: Proto) -> None:
    q.start("a", token="t", result_ttl=60)
    assert q.complete(("a", "t", '{"r":1}')) == [True]
    job = q.job("a")
    finished = int(job["finished_at"])
    assert (job["state"], job["result"]) == ("completed", '{"r":1}')
    assert q.progress("a", "t", 0.5) == 0  # the old lease holder is fenced off
    assert job["worker"] == "w1"  # who ran it stays visible
    assert q.score(q.keys.active, "a") is None
    assert q.score(q.keys.completed, "a") == finished + 60_000
    assert 119_000 < q.ttl_ms(q.keys.job("a")) <= 120_000  # ttl + 60 s grace for the sweep
    assert q.events("completed") == [{"event": "completed", "id": "a"}]


def test_the_default_retention_keeps_the_record_and_its_log_a_day_and_the_grace(
    q: Proto,
) -> None:
    """No `result_ttl`: the default, 86,400,000 ms, written out in complete.lua's own
    path (an absolute expiry, PEXPIREAT), for the record and a logged run's log alike."""
    from conveyor.protocol import observe

    q.start("a", token="t")
    assert q.run(observe.job_log(q.keys, job_id="a", token="t", lines=["a line"])) == 1
    assert q.complete(("a", "t", "1")) == [True]
    finished = int(q.job("a")["finished_at"])
    assert q.score(q.keys.completed, "a") == finished + 86_400_000
    for key in (q.keys.job("a"), q.keys.job_log("a")):
        assert 86_459_000 < q.ttl_ms(key) <= 86_460_000  # a day + 60 s grace for the sweep


def test_a_wrong_token_is_refused_and_changes_nothing(q: Proto) -> None:
    q.start("a", token="t")
    before = q.snapshot("a")
    assert q.complete(("a", "stale", '"x"')) == [False]
    assert q.snapshot("a") == before


def test_a_second_complete_is_refused(q: Proto) -> None:
    q.start("a", token="t")
    assert q.complete_one("a", "t", '"first"')
    before = q.snapshot("a")
    assert not q.complete_one("a", "t", '"second"')
    assert q.snapshot("a") == before
    assert q.job("a")["result"] == '"first"'


def test_jobs_not_active_are_refused(q: Proto) -> None:
    q.enqueue("waiting")
    before = q.snapshot("waiting")
    assert q.complete(("waiting", "", '"x"'), ("missing", "t", '"x"')) == [False, False]
    assert q.snapshot("waiting") == before
    assert q.r.exists(q.keys.job("missing")) == 0


def test_a_batch_answers_per_job(q: Proto) -> None:
    q.enqueue("a")
    q.enqueue("b")
    q.claim(2, token="t")
    assert q.complete(("a", "t", "1"), ("b", "x", "2")) == [True, False]
    assert (q.job("a")["state"], q.job("b")["state"]) == ("completed", "active")
    assert q.members(q.keys.active) == ["b"]


def test_result_ttl_zero_deletes_the_record_at_once(q: Proto) -> None:
    q.start("a", token="t", result_ttl=0)
    assert q.complete_one("a", "t")
    assert q.r.exists(q.keys.job("a")) == 0
    assert q.members(q.keys.completed) == []
    assert q.events("completed") == [{"event": "completed", "id": "a"}]


def test_expired_records_are_swept_two_per_completed_job(q: Proto) -> None:
    for i in range(5):
        q.r.hset(q.keys.job(f"old{i}"), mapping={"state": "completed"})
        q.r.zadd(q.keys.completed, {f"old{i}": 1 + i})
    q.start("a", token="t")
    q.complete_one("a", "t")
    assert q.members(q.keys.completed) == ["old2", "old3", "old4", "a"]
    assert [q.r.exists(q.keys.job(f"old{i}")) for i in range(5)] == [0, 0, 1, 1, 1]


def test_sweep_keeps_a_record_whose_id_came_back(q: Proto) -> None:
    # `x` expired, was enqueued anew, and its old index entry survived
    q.r.zadd(q.keys.completed, {"x": 1})
    q.r.hset(q.keys.job("x"), mapping={"state": "waiting", "priority": 9, "seq": 1})
    q.start("a", token="t")
    q.complete_one("a", "t")
    assert q.score(q.keys.completed, "x") is None
    assert q.job("x")["state"] == "waiting"


def test_a_live_retained_record_is_not_swept(q: Proto) -> None:
    q.start("a", token="t", result_ttl=60)
    q.complete_one("a", "t")
    q.start("b", token="t")
    q.complete_one("b", "t")
    assert q.members(q.keys.completed) == ["a", "b"]
    assert q.job("a")["state"] == "completed"


def test_waiters_are_told_through_the_done_list(q: Proto) -> None:
    q.start("a", token="t")
    assert q.await_job("a").state == "pending"
    q.complete_one("a", "t", '{"r":2}')
    done = q.keys.done("a")
    assert q.r.lrange(done, 0, -1) == [b'completed\n{"r":2}']
    assert 59_000 < q.ttl_ms(done) <= 60_000
    assert "waiters" not in q.job("a")


def test_no_waiter_no_done_list(q: Proto) -> None:
    q.start("a", token="t")
    q.complete_one("a", "t")
    assert q.r.exists(q.keys.done("a")) == 0


def test_completion_releases_a_blocked_twin_as_the_next_run(q: Proto) -> None:
    q.start("s", token="t", data=1)
    q.enqueue("other")
    q.enqueue("s", data=2)
    q.clear_marker()
    assert q.complete_one("s", "t", '"r1"')
    job = q.job("s")
    assert (job["state"], job["data"], job["attempts"]) == ("waiting", "2", "0")
    assert "result" not in job and "token" not in job and "finished_at" not in job
    assert not any(k.startswith("u_") for k in job)
    assert q.r.exists(q.keys.blocked_job("s")) == 0
    assert q.members(q.keys.blocked) == []
    assert q.members(q.keys.completed) == []  # the ended run is not retained
    assert q.ttl_ms(q.keys.job("s")) == -1
    assert q.members(q.keys.ready) == ["other", "s"]  # the twin's own enqueue seq
    assert job["seq"] == str(HALF + 3)
    assert q.marker_set()
    assert q.events("completed") == [{"event": "completed", "id": "s"}]


def test_a_delayed_twin_is_released_into_scheduled(q: Proto) -> None:
    q.start("s", token="t")
    q.enqueue("s", delay=30)
    due = int(q.twin("s")["run_at"])
    q.complete_one("s", "t")
    assert q.job("s")["state"] == "delayed"
    assert q.score(q.keys.scheduled, "s") == due


def test_waiters_of_the_ended_run_are_told_before_the_twin_takes_over(q: Proto) -> None:
    q.start("s", token="t")
    q.await_job("s")
    q.enqueue("s", data=2)
    q.complete_one("s", "t", '"r1"')
    assert q.r.lrange(q.keys.done("s"), 0, -1) == [b'completed\n"r1"']
    assert "waiters" not in q.job("s")


def test_a_jobs_log_expires_with_its_record_and_only_a_logged_run_pays_for_it(q: Proto) -> None:
    from conveyor.protocol import observe

    q.start("a", token="t", result_ttl=60)
    assert q.run(observe.job_log(q.keys, job_id="a", token="t", lines=["a line"])) == 1
    assert q.job("a")["logged"] == "1"
    q.start("b", token="u", result_ttl=60)
    assert q.complete(("a", "t", "1"), ("b", "u", "2")) == [True, True]
    # the log now lives as long as its record: ttl + 60 s grace
    assert 119_000 < q.ttl_ms(q.keys.job_log("a")) <= 120_000
    assert "logged" not in q.job("b") and q.r.exists(q.keys.job_log("b")) == 0


def test_a_call_completing_several_jobs_writes_one_entry_naming_them(q: Proto) -> None:
    """§11: `ids` space-separated in the call's order; a fenced-off item is left out."""
    for job_id in ("a", "b", "c"):
        q.enqueue(job_id)
    assert q.claimed_ids(3, token="t") == ["a", "b", "c"]
    assert q.complete(("c", "t", "1"), ("b", "stale", "2"), ("a", "t", "3")) == [True, False, True]
    assert q.events("completed") == [{"event": "completed", "ids": "c a"}]
    assert q.complete(("b", "t", "2")) == [True]
    assert q.events("completed")[1:] == [{"event": "completed", "id": "b"}]

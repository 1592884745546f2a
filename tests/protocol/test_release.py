"""release.lua: leases given back unrun, with no failure or stall counted."""

from __future__ import annotations

from .harness import Proto


def test_release_puts_the_job_back_at_its_old_place(q: Proto) -> None:
    q.start("a", token="t")
    q.enqueue("b")
    score = q.ready_score("a")
    q.clear_marker()
    assert q.release(("a", "t")) == [1]
    job = q.job("a")
    assert (job["state"], job["attempts"], job["failures"], job["stalls"]) == (
        "waiting", "0", "0", "0",
    )  # fmt: skip
    assert q.progress("a", "t", 0.5) == 0  # the old lease holder is fenced off
    assert q.members(q.keys.active) == []
    assert q.members(q.keys.ready) == ["a", "b"]
    assert q.score(q.keys.ready, "a") == score
    assert q.marker_set()
    assert q.events("released") == [{"event": "released", "id": "a"}]


def test_a_released_job_is_claimed_again_as_its_first_attempt(q: Proto) -> None:
    q.start("a", token="t1")
    q.release(("a", "t1"))
    (job,) = q.claim(token="t2").jobs
    assert (job.id, job.attempts) == ("a", 1)


def test_a_wrong_token_is_refused_and_changes_nothing(q: Proto) -> None:
    q.start("a", token="t")
    before = q.snapshot("a")
    assert q.release(("a", "other"), ("missing", "t")) == [0, 0]
    assert q.snapshot("a") == before


def test_a_batch_answers_per_job(q: Proto) -> None:
    for job_id in ("a", "b", "c"):
        q.enqueue(job_id)
    q.claim(3, token="t")
    q.complete_one("b", "t")
    assert q.release(("a", "t"), ("b", "t"), ("c", "t")) == [1, 0, 1]
    assert q.members(q.keys.ready) == ["a", "c"]
    assert q.job("b")["state"] == "completed"


def test_release_merges_a_blocked_twin(q: Proto) -> None:
    q.start("s", token="t", data=1)
    q.enqueue("s", data=2)
    assert q.release(("s", "t")) == [1]
    job = q.job("s")
    assert (job["state"], job["data"], job["attempts"]) == ("waiting", "2", "0")
    assert q.r.exists(q.keys.blocked_job("s")) == 0
    assert q.members(q.keys.blocked) == []
    assert q.members(q.keys.ready) == ["s"]


def test_release_honours_a_later_run_at_of_the_merged_twin(q: Proto) -> None:
    q.start("s", token="t")
    q.enqueue("s", delay=30)
    due = int(q.twin("s")["run_at"])
    assert q.release(("s", "t")) == [1]
    assert q.job("s")["state"] == "delayed"
    assert q.score(q.keys.scheduled, "s") == due
    assert q.members(q.keys.ready) == []


def test_an_interrupted_run_keeps_its_attempt(q: Proto) -> None:
    q.start("a", token="t1")
    assert q.release(("a", "t1"), started=True) == [1]
    assert q.job("a")["attempts"] == "1"
    (job,) = q.claim(token="t2").jobs
    assert job.attempts == 2  # the handler can tell it is a re-delivery

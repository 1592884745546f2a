"""retry.lua: a failed job runs again, its counts reset and its record kept for good."""

from __future__ import annotations

import pytest

from .harness import Proto


def test_a_failed_job_is_waiting_again_at_its_old_place(q: Proto) -> None:
    q.put("a", "failed", result_ttl=60)
    q.r.hset(q.keys.job("a"), "stalls", 2)  # an earlier run stalled
    q.enqueue("b")
    failed = q.job("a")
    assert (failed["failures"], failed["attempts"]) == ("1", "1")
    assert q.members(q.keys.failed) == ["a"]
    assert q.ttl_ms(q.keys.job("a")) > 0
    q.clear_marker()
    before = q.now()
    assert q.retry("a") == 1
    job = q.job("a")
    assert (job["state"], job["failures"], job["stalls"], job["attempts"]) == (
        "waiting", "0", "0", "1",
    )  # fmt: skip
    assert job["error"] == failed["error"]  # kept until the next run ends
    assert job["seq"] == failed["seq"]
    assert "finished_at" not in job
    assert before <= int(job["run_at"]) <= q.now()
    assert q.ttl_ms(q.keys.job("a")) == -1  # PERSIST: no longer expires
    assert q.members(q.keys.failed) == []
    assert q.members(q.keys.ready) == ["a", "b"]
    assert q.score(q.keys.ready, "a") == q.ready_score("a")
    assert q.marker_set()
    assert q.events("retried") == [{"event": "retried", "id": "a", "manual": "1"}]


def test_the_next_run_counts_on_from_the_kept_attempts(q: Proto) -> None:
    q.put("a", "failed")
    assert q.retry("a") == 1
    (job,) = q.claim(token="t2").jobs
    assert (job.id, job.attempts, job.failures, job.stalls) == ("a", 2, 0, 0)
    assert q.complete_one("a", "t2")
    assert q.job("a")["state"] == "completed"


def test_a_grouped_job_waits_in_its_group_and_the_group_joins_the_rotation(q: Proto) -> None:
    q.put("a", "failed", group="g")
    assert q.members(q.keys.groups) == []
    assert q.retry("a") == 1
    assert q.score(q.keys.group_ready("g"), "a") == q.ready_score("a")
    assert q.members(q.keys.groups) == ["g"]
    assert q.members(q.keys.ready) == []
    assert q.claimed_ids() == ["a"]


def test_a_retried_job_stays_in_its_property_index(q: Proto) -> None:
    q.put("a", "failed", index={"user_id": 1})
    index = q.keys.index("user_id", "1")
    created = q.score(index, "a")
    assert q.retry("a") == 1
    assert q.score(index, "a") == created


@pytest.mark.parametrize("state", ["waiting", "delayed", "active", "completed"])
def test_a_job_that_has_not_failed_is_left_alone(q: Proto, state: str) -> None:
    q.put("a", state)
    before = q.snapshot("a")
    ttl = q.ttl_ms(q.keys.job("a"))
    q.clear_marker()
    assert q.retry("a") == 0
    assert q.snapshot("a") == before
    assert not q.marker_set()
    assert (q.ttl_ms(q.keys.job("a")) > 0) == (ttl > 0)  # a completed record still expires


def test_a_failed_record_already_deleted_is_missing(q: Proto) -> None:
    q.start("a", token="t", result_ttl=0)
    assert q.fail("a", "t", permanent=True) == "failed"  # and deleted at once
    before = q.snapshot("a")
    assert q.retry("a") == 0
    assert q.snapshot("a") == before
    assert q.r.exists(q.keys.job("a")) == 0

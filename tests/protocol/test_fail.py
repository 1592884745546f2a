"""fail.lua: fenced failure, backoff, retry_delay, permanent and final failure."""

from __future__ import annotations

import pytest

from conveyor.protocol import ops

from .harness import Proto


def retried_delay(q: Proto) -> int:
    (event,) = q.events("retried")
    return int(event["delay_ms"])


def test_a_failure_with_retries_left_is_scheduled_after_its_backoff(q: Proto) -> None:
    q.start("a", token="t", min_backoff=0.1, max_backoff=1)
    before = q.now()
    assert q.fail("a", "t", "ValueError: bad") == "delayed"
    job = q.job("a")
    assert (job["state"], job["failures"], job["error"]) == ("delayed", "1", "ValueError: bad")
    assert q.progress("a", "t", 0.5) == 0  # the old lease holder is fenced off
    assert q.score(q.keys.active, "a") is None
    due = int(job["run_at"])
    assert q.score(q.keys.scheduled, "a") == due
    assert before + 100 <= due <= q.now() + 100
    assert q.events("retried") == [
        {"event": "retried", "id": "a", "error": "ValueError: bad", "delay_ms": "100"}
    ]
    assert q.members(q.keys.failed) == []


@pytest.mark.parametrize(
    ("failures_before", "jitter", "delay"),
    [
        (0, 0.0, 100),  # first failure: min_backoff
        (0, 0.999, 100),
        (2, 0.0, 200),  # third: 400 ms halved by zero jitter
        (2, 0.5, 300),
        (2, 0.999, 399),
        (9, 0.0, 500),  # capped at max_backoff, halved
        (9, 0.999, 999),
        (200, 0.999, 999),  # a huge exponent still caps
    ],
)
def test_backoff_is_exponential_with_equal_jitter_within_bounds(
    q: Proto, failures_before: int, jitter: float, delay: int
) -> None:
    q.start("a", token="t", min_backoff=0.1, max_backoff=1, max_failures=1000)
    q.r.hset(q.keys.job("a"), "failures", failures_before)
    assert q.fail("a", "t", jitter=jitter) == "delayed"
    assert retried_delay(q) == delay
    job = q.job("a")
    assert job["failures"] == str(failures_before + 1)
    assert q.score(q.keys.scheduled, "a") == int(job["run_at"])


def test_zero_backoff_retries_at_once_at_the_old_place(q: Proto) -> None:
    q.start("a", token="t", min_backoff=0, max_backoff=0)
    q.enqueue("b")
    score = q.ready_score("a")
    q.clear_marker()
    assert q.fail("a", "t") == "retried"
    assert q.job("a")["state"] == "waiting"
    assert q.members(q.keys.ready) == ["a", "b"]
    assert q.score(q.keys.ready, "a") == score
    assert q.marker_set()
    assert retried_delay(q) == 0


def test_retry_delay_overrides_the_backoff(q: Proto) -> None:
    q.start("a", token="t", min_backoff=100, max_backoff=200)
    before = q.now()
    assert q.fail("a", "t", retry_delay_ms=5_000) == "delayed"
    assert retried_delay(q) == 5_000
    due = q.score(q.keys.scheduled, "a")
    assert due is not None and before + 5_000 <= due <= q.now() + 5_000


def test_a_zero_retry_delay_makes_the_job_ready_now(q: Proto) -> None:
    q.start("a", token="t", min_backoff=100)
    assert q.fail("a", "t", retry_delay_ms=0) == "retried"
    assert q.members(q.keys.ready) == ["a"]
    assert q.members(q.keys.scheduled) == []


def test_a_permanent_failure_ends_the_job_at_once(q: Proto) -> None:
    q.start("a", token="t", max_failures=5, result_ttl=60)
    assert q.fail("a", "t", "PermanentError: no", permanent=True) == "failed"
    job = q.job("a")
    finished = int(job["finished_at"])
    assert (job["state"], job["failures"], job["error"]) == ("failed", "1", "PermanentError: no")
    assert q.progress("a", "t", 0.5) == 0  # the old lease holder is fenced off
    assert q.score(q.keys.failed, "a") == finished + 60_000
    assert 119_000 < q.ttl_ms(q.keys.job("a")) <= 120_000  # ttl + 60 s grace for the sweep
    assert q.members(q.keys.active) == []
    assert q.members(q.keys.ready) == [] and q.members(q.keys.scheduled) == []
    assert q.events("failed") == [{"event": "failed", "id": "a", "error": "PermanentError: no"}]
    assert q.events("retried") == []


def test_max_failures_ends_the_job_at_the_last_allowed_failure(q: Proto) -> None:
    q.start("a", token="t1", max_failures=2, min_backoff=0)
    assert q.fail("a", "t1", "first") == "retried"
    q.claim(token="t2")
    assert q.fail("a", "t2", "second") == "failed"
    job = q.job("a")
    assert (job["state"], job["failures"], job["attempts"], job["error"]) == (
        "failed", "2", "2", "second",
    )  # fmt: skip


def test_max_failures_one_means_no_retry(q: Proto) -> None:
    q.start("a", token="t", max_failures=1)
    assert q.fail("a", "t") == "failed"


def test_a_wrong_token_is_refused_and_changes_nothing(q: Proto) -> None:
    q.start("a", token="t")
    before = q.snapshot("a")
    assert q.fail("a", "nope") == "lost"
    assert q.fail("missing", "t") == "lost"
    assert q.snapshot("a") == before
    assert q.r.exists(q.keys.job("missing")) == 0


def test_a_finished_run_refuses_a_late_failure(q: Proto) -> None:
    q.start("a", token="t")
    q.complete_one("a", "t")
    before = q.snapshot("a")
    assert q.fail("a", "t") == "lost"
    assert q.snapshot("a") == before


def test_a_batch_answers_per_job(q: Proto) -> None:
    for job_id in ("a", "b", "c"):
        q.enqueue(job_id, min_backoff=0, max_failures=2)
    q.claim(3, token="t")
    items = [
        ops.FailItem("a", "t", "e", False, None, 0.0),
        ops.FailItem("b", "t", "e", True, None, 0.0),
        ops.FailItem("c", "x", "e", False, None, 0.0),
    ]
    assert q.fail_items(*items) == ["retried", "failed", "lost"]


def test_result_ttl_zero_deletes_a_failed_record(q: Proto) -> None:
    q.start("a", token="t", result_ttl=0)
    assert q.fail("a", "t", permanent=True) == "failed"
    assert q.r.exists(q.keys.job("a")) == 0
    assert q.members(q.keys.failed) == []


def test_expired_failed_records_are_swept(q: Proto) -> None:
    for i in range(3):
        q.r.hset(q.keys.job(f"old{i}"), "state", "failed")
        q.r.zadd(q.keys.failed, {f"old{i}": 1 + i})
    q.start("a", token="t")
    q.fail("a", "t", permanent=True)
    assert q.members(q.keys.failed) == ["old2", "a"]
    assert [q.r.exists(q.keys.job(f"old{i}")) for i in range(3)] == [0, 0, 1]


def test_waiters_hear_of_the_final_failure_not_of_retries(q: Proto) -> None:
    q.start("a", token="t1", max_failures=2, min_backoff=0)
    assert q.await_job("a").state == "pending"
    q.fail("a", "t1", "first")
    assert q.r.exists(q.keys.done("a")) == 0
    assert q.job("a")["waiters"] == "1"
    q.claim(token="t2")
    q.fail("a", "t2", "second")
    assert q.r.lrange(q.keys.done("a"), 0, -1) == [b"failed\nsecond"]
    assert "waiters" not in q.job("a")


def test_final_failure_releases_a_blocked_twin(q: Proto) -> None:
    q.start("s", token="t", max_failures=1, data=1)
    q.enqueue("s", data=2)
    assert q.fail("s", "t") == "failed"
    job = q.job("s")
    assert (job["state"], job["data"], job["failures"]) == ("waiting", "2", "0")
    assert "error" not in job
    assert q.members(q.keys.ready) == ["s"]
    assert q.members(q.keys.failed) == [] and q.members(q.keys.blocked) == []
    assert q.events("failed") == [{"event": "failed", "id": "s", "error": "boom"}]


def test_a_retry_merges_a_blocked_twin_by_its_upsert_rules(q: Proto) -> None:
    q.start("s", token="t", min_backoff=0, max_failures=3, data=1)
    q.enqueue("s", data=2, max_failures=9, update_max_failures=True)
    assert q.fail("s", "t") == "retried"
    job = q.job("s")
    assert (job["state"], job["data"], job["max_failures"]) == ("waiting", "2", "9")
    assert (job["failures"], job["attempts"]) == ("0", "1")  # u_reset: failures only
    assert not any(k.startswith("u_") for k in job)
    assert q.r.exists(q.keys.blocked_job("s")) == 0
    assert q.members(q.keys.blocked) == []
    assert q.members(q.keys.ready) == ["s"]


def test_a_merge_without_update_data_keeps_the_run_data_and_counts(q: Proto) -> None:
    q.start("s", token="t", min_backoff=0, data=1)
    q.enqueue("s", data=2, update_data=False)
    assert q.fail("s", "t") == "retried"
    job = q.job("s")
    assert (job["data"], job["failures"], job["attempts"]) == ("1", "1", "1")
    assert q.r.exists(q.keys.blocked_job("s")) == 0


def test_a_merged_twin_run_at_is_honoured_by_the_retry(q: Proto) -> None:
    q.start("s", token="t", min_backoff=0)
    q.enqueue("s", delay=30)
    due = int(q.twin("s")["run_at"])
    assert q.fail("s", "t") == "delayed"
    job = q.job("s")
    assert (job["state"], job["run_at"]) == ("delayed", str(due))
    assert q.score(q.keys.scheduled, "s") == due
    assert q.members(q.keys.ready) == []


def test_the_backoff_wins_over_an_earlier_merged_run_at(q: Proto) -> None:
    q.start("s", token="t", min_backoff=20)
    q.enqueue("s")  # run_at now, update_run_at=True
    before = q.now()
    assert q.fail("s", "t") == "delayed"
    due = q.score(q.keys.scheduled, "s")
    assert due is not None and due >= before + 20_000


def test_a_record_missing_its_options_fails_by_the_record_defaults(q: Proto) -> None:
    """A record leaves out options at their defaults (protocol 4.1): max_failures
    3, min_backoff 1 s, so a first failure retries after about a second."""
    q.start("a", token="t")
    q.r.hdel(q.keys.job("a"), "max_failures", "min_backoff", "max_backoff")
    before = q.now()
    assert q.fail("a", "t", jitter=0.0) == "delayed"
    due = q.score(q.keys.scheduled, "a")
    assert due is not None and before + 1000 <= due <= q.now() + 1000
    assert q.members(q.keys.active) == []


def test_non_numeric_options_fall_back_to_the_defaults_instead_of_raising(q: Proto) -> None:
    q.start("a", token="t")
    q.r.hset(q.keys.job("a"), mapping={"max_failures": "lots", "min_backoff": "x"})
    assert q.fail("a", "t") == "delayed"  # max_failures falls back to 3: retries left
    assert q.job("a")["state"] == "delayed"
    assert q.members(q.keys.active) == []

"""policy.lua: a claimed job takes its task's options where it carries none."""

from __future__ import annotations

from conveyor.protocol import ops

from .harness import Proto


def stored(q: Proto, job_id: str) -> dict[str, str]:
    """The fields the record holds (not the defaults a reader fills in)."""
    return {ops.text(k): ops.text(v) for k, v in q.r.hgetall(q.keys.job(job_id)).items()}


TASK = (("max_failures", 7), ("min_backoff", 50), ("timeout", 2_000))


def test_fills_the_options_a_job_leaves_out(q: Proto) -> None:
    q.start("a", token="t")
    assert q.run(ops.policy(q.keys, "a", "t", TASK)) == [b"ok", 2_000]
    record = stored(q, "a")
    assert (record["max_failures"], record["min_backoff"], record["timeout"]) == (
        "7",
        "50",
        "2000",
    )
    assert "max_backoff" not in record  # not named: the protocol default stays


def test_options_the_job_carries_win(q: Proto) -> None:
    q.start("a", token="t", max_failures=2, timeout=9)
    assert ops.decode_policy(q.run(ops.policy(q.keys, "a", "t", TASK))) == 9_000
    record = stored(q, "a")
    assert (record["max_failures"], record["min_backoff"]) == ("2", "50")


def test_the_task_max_failures_governs_the_retries(q: Proto) -> None:
    q.start("a", token="t")
    q.run(ops.policy(q.keys, "a", "t", (("max_failures", 1),)))
    assert q.fail("a", "t") == "failed"  # the protocol default (3) would retry


def test_a_lost_lease_changes_nothing(q: Proto) -> None:
    q.start("a", token="t")
    assert ops.decode_policy(q.run(ops.policy(q.keys, "a", "other", TASK))) is None
    q.enqueue("w")  # waiting, not active
    assert q.run(ops.policy(q.keys, "w", "t", TASK)) == [b"lost"]
    assert "max_failures" not in stored(q, "a") and "max_failures" not in stored(q, "w")


def test_bad_names_and_values_are_refused_whole(q: Proto) -> None:
    q.start("a", token="t")
    for bad in ((("priority", 1),), (("timeout", -1),), (("timeout", "x"),)):
        assert q.run(ops.policy(q.keys, "a", "t", bad)) == [b"bad"]  # type: ignore[arg-type]
    assert q.run(ops.policy(q.keys, "a", "t", (("max_stalls", 1), ("state", 1)))) == [b"bad"]
    assert "max_stalls" not in stored(q, "a")

"""Attempt history (include/history.lua, protocol §16.1): fail.lua and reap.lua
append each failed or stalled run's error to the record's `errors`, bounded."""

from __future__ import annotations

import json
import time

from .harness import Proto


def _history(q: Proto, job_id: str) -> list[dict[str, object]]:
    return list(json.loads(q.job(job_id)["errors"]))


def test_each_failed_run_is_kept_oldest_first(q: Proto) -> None:
    q.start("a", token="t1")
    before = q.now()
    assert q.fail("a", "t1", "ValueError: one\nTraceback ...", retry_delay_ms=0) == "retried"
    assert q.claimed_ids(token="t2") == ["a"]
    assert q.fail("a", "t2", "KeyError: two", retry_delay_ms=0) == "retried"
    assert q.claimed_ids(token="t3") == ["a"]
    assert q.fail("a", "t3", "final", permanent=True) == "failed"
    history = _history(q, "a")
    assert [(e["attempt"], e["error"]) for e in history] == [
        (1, "ValueError: one\nTraceback ..."), (2, "KeyError: two"), (3, "final"),
    ]  # fmt: skip
    assert all(before <= int(str(e["at"])) <= q.now() for e in history)
    assert q.job("a")["error"] == "final"  # the latest error stays where it was


def test_the_history_keeps_the_last_ten_and_cuts_long_texts(q: Proto) -> None:
    q.start("a", token="t0", max_failures=20)
    long_error = "é" * 5000  # 10,000 bytes: cut to at most 8192, on a character boundary
    for n in range(12):
        error = long_error if n == 11 else f"error {n}"
        assert q.fail("a", f"t{n}", error, retry_delay_ms=0) == "retried"
        assert q.claimed_ids(token=f"t{n + 1}") == ["a"]
    history = _history(q, "a")
    assert [e["attempt"] for e in history] == list(range(3, 13))
    assert history[0]["error"] == "error 2"
    kept = str(history[-1]["error"])
    assert kept == "é" * 4096 and len(kept.encode()) == 8192


def test_a_stall_is_in_the_history_too(q: Proto) -> None:
    q.start("a", token="t1", lease_ms=40, max_stalls=2)
    time.sleep(0.06)
    assert q.reap().recovered == 1
    assert q.claimed_ids(token="t2", lease_ms=40) == ["a"]
    time.sleep(0.06)
    assert q.reap().failed == 1
    errors = [(e["attempt"], e["error"]) for e in _history(q, "a")]
    assert errors == [
        (1, "StalledError: lease expired 1 time(s); the worker died or hung"),
        (2, "StalledError: lease expired 2 time(s); the worker died or hung"),
    ]


def test_a_corrupt_history_starts_afresh(q: Proto) -> None:
    q.start("a", token="t1")
    q.r.hset(q.keys.job("a"), "errors", "not json")
    assert q.fail("a", "t1", "boom", retry_delay_ms=0) == "retried"
    assert [e["error"] for e in _history(q, "a")] == ["boom"]

"""Deduplication (include/dedup.lua in enqueue.lua, protocol §16.3): simple,
throttle and debounce modes, the reply's standing ids, events, key cleanup."""

from __future__ import annotations

import time
from typing import Any

from conveyor.protocol import ops

from .harness import MAXLEN, Proto


def _send(q: Proto, *jobs: tuple[str, tuple[str, ...], dict[str, Any]]) -> list[Any]:
    """One enqueue call of (id, extra opts lines, options) jobs; the raw reply."""
    specs = []
    for job_id, extra, options in jobs:
        spec = q.spec(job_id, **options)
        spec.extra = extra
        specs.append(spec)
    return [ops.text(x) for x in q.run(ops.enqueue(q.keys, specs, events_maxlen=MAXLEN))]


SIMPLE = ("dedup=k", "dedup_mode=simple")


def test_a_missing_or_unknown_mode_is_simple(q: Proto) -> None:
    assert _send(q, ("a", ("dedup=k",), {})) == ["created", "waiting"]
    assert _send(q, ("b", ("dedup=k",), {})) == ["deduplicated", "waiting", "1", "a"]
    assert _send(q, ("c", ("dedup=k", "dedup_mode=other"), {})) == [
        "deduplicated", "waiting", "1", "a",
    ]  # fmt: skip
    assert q.r.get(q.keys.base + "dedup:k") == b"a" and q.job("b") == q.job("c") == {}


def test_simple_mode_stands_aside_while_the_job_is_unfinished(q: Proto) -> None:
    assert _send(q, ("a", SIMPLE, {"data": 1})) == ["created", "waiting"]
    assert q.r.get(q.keys.base + "dedup:k") == b"a"
    assert q.stored("a")["dedup"] == "k"
    reply = _send(q, ("b", SIMPLE, {"data": 2}), ("c", (), {}), ("d", SIMPLE, {}))
    assert reply == ["deduplicated", "waiting", "created", "waiting", "deduplicated", "waiting",
                     "1", "a", "3", "a"]  # fmt: skip
    assert q.job("b") == {} and q.job("a")["data"] == "1"
    assert q.events("deduplicated") == [
        {"event": "deduplicated", "id": "a", "dedup": "k", "mode": "simple"},
    ] * 2
    assert q.claimed_ids() == ["a"]
    assert _send(q, ("e", SIMPLE, {})) == ["deduplicated", "active", "1", "a"]
    assert q.complete_one("a")
    assert _send(q, ("f", SIMPLE, {})) == ["created", "waiting"]  # the job finished
    assert q.r.get(q.keys.base + "dedup:k") == b"f"


def test_a_simple_key_goes_with_the_record_that_holds_it(q: Proto) -> None:
    _send(q, ("a", SIMPLE, {"result_ttl": 0}))
    assert q.claimed_ids() == ["a"]
    assert q.complete_one("a")  # result_ttl 0: the record is deleted at once
    assert q.r.exists(q.keys.base + "dedup:k") == 0


def test_throttle_stands_aside_for_the_ttl_even_after_the_job_is_gone(q: Proto) -> None:
    throttle = ("dedup=k", "dedup_mode=throttle", "dedup_ttl=300")
    assert _send(q, ("a", throttle, {"result_ttl": 0})) == ["created", "waiting"]
    assert 0 < q.ttl_ms(q.keys.base + "dedup:k") <= 300
    assert q.claimed_ids() == ["a"]
    assert q.complete_one("a")
    assert q.job("a") == {}
    assert q.r.get(q.keys.base + "dedup:k") == b"a"  # a TTL key is left to expire
    assert _send(q, ("b", throttle, {})) == ["deduplicated", "", "1", "a"]
    time.sleep(0.35)
    assert _send(q, ("c", throttle, {})) == ["created", "waiting"]


def test_debounce_replaces_the_data_and_pushes_the_run_back(q: Proto) -> None:
    debounce = ("dedup=k", "dedup_mode=debounce")
    assert _send(q, ("a", debounce, {"data": 1, "delay": 10})) == ["created", "delayed"]
    first_due = q.score(q.keys.scheduled, "a")
    time.sleep(0.01)
    assert _send(q, ("b", debounce, {"data": 2, "delay": 10})) == ["updated", "delayed", "1", "a"]
    assert q.job("b") == {}
    assert q.job("a")["data"] == "2"
    assert first_due is not None and q.score(q.keys.scheduled, "a") > first_due
    (event,) = q.events("debounced")
    assert (event["id"], event["dedup"]) == ("a", "k")
    assert int(event["run_at"]) == q.score(q.keys.scheduled, "a")
    q.promote("a")
    assert q.claimed_ids() == ["a"]
    # the standing job runs: the next one is a new job
    assert _send(q, ("c", debounce, {"data": 3, "delay": 10})) == ["created", "delayed"]
    assert q.r.get(q.keys.base + "dedup:k") == b"c"


def test_a_resend_of_a_created_job_is_not_deduplicated_against_itself(q: Proto) -> None:
    spec = q.spec("a")
    spec.extra = SIMPLE
    call = ops.enqueue(q.keys, [spec], events_maxlen=MAXLEN)
    assert [ops.text(x) for x in q.run(call)] == ["created", "waiting"]
    assert [ops.text(x) for x in q.run(call)] == ["exists", "waiting"]

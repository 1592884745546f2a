"""enqueue_skip.lua: given ids created unless they exist, in one call, no look-up first."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from conveyor.client.transport import translated
from conveyor.errors import ValidationError
from conveyor.protocol import ops

from .harness import HALF, MAXLEN, SEQ_SPAN, Proto, text

OPTIONS: dict[str, Any] = {"priority": 7, "max_failures": 4, "min_backoff": 0.2, "timeout": 3}


@pytest.mark.parametrize("data", [7, "a" * 61 + "€" + "b" * 34], ids=["short", "in-pieces"])
def test_creates_what_enqueue_creates_for_given_ids(q: Proto, data: Any) -> None:
    skipped = [q.spec(f"s{i}", "send", [i, data], **OPTIONS) for i in range(3)]
    full = [q.spec(f"e{i}", "send", [i, data], **OPTIONS) for i in range(3)]
    q.clear_marker()
    assert q.enqueue_skip(skipped) == 3
    assert q.marker_set()
    q.enqueue_specs(full)
    for i in range(3):
        new, old = q.stored(f"s{i}"), q.stored(f"e{i}")
        old.pop("req")  # enqueue keeps the request id of a given id; enqueue_skip needs none
        assert new.pop("seq") == str(HALF + 1 + i)
        assert old.pop("seq") == str(HALF + 4 + i)
        assert new.keys() == old.keys()
        assert {k: v for k, v in new.items() if k != "created_at"} == {
            k: v for k, v in old.items() if k != "created_at"
        }
        assert q.score(q.keys.ready, f"s{i}") == 7 * SEQ_SPAN + HALF + 1 + i
    assert q.members(q.keys.ready) == ["s0", "s1", "s2", "e0", "e1", "e2"]
    assert [(e["event"], e["id"], e["state"]) for e in q.job_events()][:3] == [
        ("created", f"s{i}", "waiting") for i in range(3)
    ]
    assert q.events()[0] == {"event": "created", "ids": "s0 s1 s2", "state": "waiting"}
    # created_at is the server time of the call's one `created` entry
    assert q.stored("s2")["created_at"] == text(q.r.xrange(q.keys.events)[0][0]).split("-")[0]


def test_a_resend_creates_nothing_and_never_runs_a_finished_job_again(q: Proto) -> None:
    for job_id, state in (("a", "active"), ("c", "completed"), ("f", "failed"),
                          ("w", "waiting"), ("d", "delayed")):  # fmt: skip
        q.put(job_id, state)
    before = q.snapshot("w", "d", "a", "c", "f")
    seq = q.r.hget(q.keys.meta, "seq")
    specs = [q.spec(job_id, "other", {"new": 1}, priority=0) for job_id in "wdacf"]
    assert q.enqueue_skip(specs) == 0
    assert q.snapshot("w", "d", "a", "c", "f") == before  # records, indexes, no event
    assert q.r.hget(q.keys.meta, "seq") == seq
    assert not q.r.exists(q.keys.blocked_job("a"))  # no blocked twin either
    # a re-send of a whole batch creates only the jobs that did not get in
    assert q.enqueue_skip([q.spec("w", "t"), q.spec("n", "t"), q.spec("c", "t")]) == 1
    assert q.members(q.keys.ready) == ["w", "n"]
    assert q.job("c")["state"] == "completed"


def test_the_reply_names_each_job_not_created_and_the_state_of_its_job(q: Proto) -> None:
    """The count, then position and state of each job that was not created: an existing
    job's state ('' for a record without one), `waiting` for an id created earlier in the call."""
    q.put("c", "completed")
    q.put("a", "active")
    q.r.hset(q.keys.job("odd"), "task", "t")  # a record without a state (corrupt)
    specs = [q.spec(job_id) for job_id in ("n1", "c", "n2", "a", "n1", "odd", "c")]
    reply = q.run(ops.enqueue_skip(q.keys, specs, events_maxlen=MAXLEN))
    assert [text(x) for x in reply] == [
        "2", "2", "completed", "4", "active", "5", "waiting", "6", "", "7", "completed",
    ]  # fmt: skip
    assert [(e.outcome, e.state) for e in ops.decode_enqueue_skip(reply, 7)] == [
        ("created", "waiting"), ("exists", "completed"), ("created", "waiting"),
        ("exists", "active"), ("exists", "waiting"), ("exists", ""), ("exists", "completed"),
    ]  # fmt: skip
    assert q.run(ops.enqueue_skip(q.keys, specs[:1], events_maxlen=MAXLEN)) == [0, 1, b"waiting"]
    with pytest.raises(ValueError, match="replied 3 items for 2 jobs"):
        ops.decode_enqueue_skip([0, 1, b"waiting"], 2)


def test_the_same_id_twice_in_one_call_is_created_once(q: Proto) -> None:
    assert q.enqueue_skip([q.spec("x", data=1), q.spec("x", data=2), q.spec("y")]) == 2
    assert q.job("x")["data"] == "1"
    assert q.members(q.keys.ready) == ["x", "y"]
    assert q.events("created") == [{"event": "created", "ids": "x y", "state": "waiting"}]


def test_a_created_id_leaves_no_stale_finished_entry(q: Proto) -> None:
    q.r.zadd(q.keys.completed, {"old": 1})  # an expired record's entry
    q.r.zadd(q.keys.failed, {"old": 1})
    assert q.enqueue_skip([q.spec("old")]) == 1
    assert q.members(q.keys.completed) == q.members(q.keys.failed) == []
    assert q.job("old")["state"] == "waiting"


def test_a_big_call_and_its_stream_trim(q: Proto) -> None:
    for i in range(200):  # one entry each
        assert q.run(ops.enqueue_skip(q.keys, [q.spec(f"one{i}")], events_maxlen=1000)) == [1]
    assert q.r.xlen(q.keys.events) == 200
    specs = [q.spec(f"j{i}", data=i, priority=i % 3) for i in range(450)]
    assert q.run(ops.enqueue_skip(q.keys, specs, events_maxlen=100)) == [450]
    assert q.r.zcard(q.keys.ready) == 650
    first = [f"j{i}" for i in range(0, 450, 3)]
    assert q.members(q.keys.ready)[:150] == first  # priority 0, FIFO
    # one entry names the 450 (§11); `maxlen` = 100 counts entries: of the nodes of 100,
    # 100 and 1 entries, `~` removes the first alone
    assert q.r.xlen(q.keys.events) == 101
    _, last = q.r.xrevrange(q.keys.events, count=1)[0]
    assert last[b"ids"].split() == [f"j{i}".encode() for i in range(450)]


def _call(q: Proto, *job_args: str) -> ops.Call:
    return ops.Call("enqueue_skip", ops.enqueue_skip_keys(q.keys), (MAXLEN, *job_args))


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (("ok", "t", "1", "", "bad"), "ARGV"),
        (("ok", "t", "1", "", "", "t", "1", ""), "job id of 0 bytes"),
        (("ok", "t", "1", "", "x" * 257, "t", "1", ""), "job id of 257 bytes"),
        (("ok", "t", "1", "", "b", "", "1", ""), "task name of 0 bytes"),
        (("ok", "t", "1", "", "b", "t", "1", "delay=5"), "option line delay=5"),
        (("ok", "t", "1", "", "b", "t", "1", "priority=-1"), "option line priority=-1"),
        (("ok", "t", "1", "", "b", "t", "1", "timeout=1.5"), "option line timeout=1.5"),
        (("ok", "t", "1", "", "b", "t", "1", "attempts=3"), "option line attempts=3"),
        (("ok", "t", "1", "", "b", "t", "1", "priority=2097153"), "priority 2097153"),
    ],
)
def test_a_malformed_call_is_a_typed_error_that_writes_nothing(
    q: Proto, args: tuple[str, ...], why: str
) -> None:
    before = q.snapshot("ok", "b")
    seq = q.r.hget(q.keys.meta, "seq")
    with pytest.raises(ValidationError, match=why), translated():
        q.run(_call(q, *args))
    assert q.snapshot("ok", "b") == before
    assert q.r.hget(q.keys.meta, "seq") == seq
    assert not q.r.exists(q.keys.job("ok"))


def test_the_builder_refuses_jobs_that_need_enqueue(q: Proto) -> None:
    for options in ({"delay": 5}, {"group": "g"}, {"lifo": True}, {"index": {"k": "v"}}):
        spec = q.spec("x", **options)
        assert spec.record_options() is None
        with pytest.raises(ValueError, match="options enqueue_skip does not take"):
            ops.enqueue_skip(q.keys, [spec], events_maxlen=MAXLEN)
    plain = dataclasses.replace(q.spec("x", priority=0, result_ttl=5), given_id=False)
    assert plain.record_options() == "priority=0\nresult_ttl=5000"

"""enqueue.lua: creating jobs, ready order, delays, upsert rules, blocked twins."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from conveyor.client.events import decode_entries
from conveyor.protocol import ops

from .harness import HALF, SEQ_SPAN, Proto


def test_creates_a_waiting_job_field_by_field(q: Proto) -> None:
    before = q.now()
    q.clear_marker()
    out = q.enqueue_specs(
        [q.spec("a", "send", {"to": "x"}, priority=7, max_failures=4, max_stalls=2,
                min_backoff=0.5, max_backoff=9, timeout=3, result_ttl=60, group="g1")]
    )  # fmt: skip
    assert [(o.outcome, o.state) for o in out] == [("created", "waiting")]
    job = q.job("a")
    created = int(job.pop("created_at"))
    assert len(job.pop("req")) == 16  # the call's random request id
    assert before <= created <= q.now()
    assert job == {
        "state": "waiting", "task": "send", "data": '{"to":"x"}', "priority": "7",
        "seq": str(HALF + 1), "attempts": "0", "failures": "0", "stalls": "0",
        "max_failures": "4", "max_stalls": "2", "min_backoff": "500", "max_backoff": "9000",
        "timeout": "3000", "result_ttl": "60000", "group": "g1", "run_at": str(created),
    }  # fmt: skip
    # a grouped job waits in its group's ready index; the group joins the rotation
    assert q.score(q.keys.group_ready("g1"), "a") == 7 * SEQ_SPAN + HALF + 1
    assert q.members(q.keys.ready) == []
    assert q.members(q.keys.groups) == ["g1"]
    assert q.members(q.keys.scheduled) == []
    assert q.ttl_ms(q.keys.job("a")) == -1
    assert q.marker_set()
    assert q.events() == [{"event": "created", "id": "a", "state": "waiting"}]
    assert q.r.hget(q.keys.meta, "seq") == b"1"


def test_a_record_stores_only_what_differs_from_the_defaults(q: Proto) -> None:
    """Protocol 4.1: options at their record default, the zero counters and a
    run_at equal to created_at are left out (a small record stays a listpack)."""
    q.enqueue_specs([q.spec("a", "send", {"to": "x"}, max_failures=3, timeout=300)])
    stored = q.stored("a")
    created = stored.pop("created_at")
    assert stored.pop("req")
    assert stored == {"state": "waiting", "task": "send", "data": '{"to":"x"}',
                      "seq": str(HALF + 1)}  # fmt: skip
    assert q.job("a")["run_at"] == created  # a reader fills the defaults in
    assert q.r.object("encoding", q.keys.job("a")) in (b"listpack", b"ziplist")


def test_an_id_the_producer_generated_is_created_like_a_given_one(q: Proto) -> None:
    spec = q.spec("x")
    fresh = dataclasses.replace(spec, given_id=False)
    assert fresh.argv()[-1] == ""  # nothing differs from the defaults
    assert [(o.outcome, o.state) for o in q.enqueue_specs([fresh])] == [("created", "waiting")]
    assert q.members(q.keys.ready) == ["x"]
    # a re-send of the same call is still recognised by its request id
    assert [o.outcome for o in q.enqueue_specs([fresh])] == ["exists"]


def test_a_resent_call_of_generated_ids_changes_nothing(q: Proto) -> None:
    """Only the first generated id of a call is looked up; a re-send finds it
    and then looks every job up, so each is reported as it is."""
    specs = [dataclasses.replace(q.spec(f"g{i}"), given_id=False) for i in range(3)]
    specs.insert(1, q.spec("given"))
    assert [o.outcome for o in q.enqueue_specs(specs)] == ["created"] * 4
    q.claim()  # g0 runs now
    again = q.enqueue_specs(specs)
    assert [(o.outcome, o.state) for o in again] == [
        ("exists", "active"), ("exists", "waiting"), ("exists", "waiting"), ("exists", "waiting"),
    ]  # fmt: skip
    assert q.members(q.keys.ready) == ["given", "g1", "g2"]
    assert q.r.exists(q.keys.blocked_job("g0")) == 0


def test_same_priority_is_fifo(q: Proto) -> None:
    for job_id in ("c", "a", "b"):
        q.enqueue(job_id)
    assert q.members(q.keys.ready) == ["c", "a", "b"]
    assert [q.job(i)["seq"] for i in ("c", "a", "b")] == [str(HALF + n) for n in (1, 2, 3)]


def test_lower_priority_number_runs_first(q: Proto) -> None:
    q.enqueue("low", priority="low")
    q.enqueue("n1", priority=1000)
    q.enqueue("high", priority=0)
    q.enqueue("n2", priority=1000)
    q.enqueue("max", priority=2**21)
    assert q.members(q.keys.ready) == ["high", "n1", "n2", "low", "max"]
    # the largest score is still an exact integer in a double
    assert q.score(q.keys.ready, "max") == 2**21 * SEQ_SPAN + HALF + 5


def test_lifo_jobs_go_first_in_their_band_newest_first(q: Proto) -> None:
    q.enqueue("f1")
    q.enqueue("l1", lifo=True)
    q.enqueue("f2")
    q.enqueue("l2", lifo=True)
    q.enqueue("urgent", priority=0)
    assert q.members(q.keys.ready) == ["urgent", "l2", "l1", "f1", "f2"]
    assert q.job("l1")["seq"] == str(HALF - 2)
    assert q.job("l2")["seq"] == str(HALF - 3)
    assert q.r.hget(q.keys.meta, "lifo_seq") == b"2"


def test_delay_makes_a_delayed_job_due_in_redis_time(q: Proto) -> None:
    before = q.now()
    q.clear_marker()
    out = q.enqueue("d", delay=2.5)
    assert (out.outcome, out.state) == ("created", "delayed")
    job = q.job("d")
    due = int(job["run_at"])
    assert due == int(job["created_at"]) + 2500
    assert before + 2500 <= due <= q.now() + 2500
    assert job["state"] == "delayed"
    assert q.score(q.keys.scheduled, "d") == due
    assert q.members(q.keys.ready) == []
    assert q.marker_set()  # an idle worker recomputes how long to sleep
    assert q.events() == [{"event": "created", "id": "d", "state": "delayed"}]


def test_run_at_is_absolute_and_a_past_one_is_ready_now(q: Proto) -> None:
    now = q.now()
    future = q.enqueue("future", run_at_ms=now + 60_000)
    past = q.enqueue("past", run_at_ms=now - 60_000)
    zero = q.enqueue("zero", delay=0)
    assert (future.state, past.state, zero.state) == ("delayed", "waiting", "waiting")
    assert q.score(q.keys.scheduled, "future") == now + 60_000
    assert q.job("past")["run_at"] == str(now - 60_000)
    assert q.members(q.keys.ready) == ["past", "zero"]


def test_a_big_batch_enters_ready_in_enqueue_order(q: Proto) -> None:
    """New jobs enter ready in one ZADD per 200: order and scores are kept."""
    ids = [f"j{i:03d}" for i in range(450)]
    out = q.enqueue_specs([q.spec(job_id) for job_id in ids])
    assert {o.outcome for o in out} == {"created"}
    assert q.members(q.keys.ready) == ids
    assert q.score(q.keys.ready, "j449") == 1000 * SEQ_SPAN + HALF + 450


def test_an_id_created_then_delayed_in_one_call_ends_up_scheduled(q: Proto) -> None:
    out = q.enqueue_specs([q.spec("a"), q.spec("b"), q.spec("a", delay=60)])
    assert [(o.outcome, o.state) for o in out] == [
        ("created", "waiting"), ("created", "waiting"), ("updated", "delayed"),
    ]  # fmt: skip
    assert q.members(q.keys.ready) == ["b"]
    assert q.members(q.keys.scheduled) == ["a"]


def test_a_batch_answers_per_job_in_order(q: Proto) -> None:
    specs = [q.spec("a"), q.spec("b", delay=60), q.spec("a", data=2)]
    out = q.enqueue_specs(specs)
    assert [(o.outcome, o.state) for o in out] == [
        ("created", "waiting"),
        ("created", "delayed"),
        ("updated", "waiting"),
    ]
    assert q.job("a")["data"] == "2"
    assert [e["event"] for e in q.events()] == ["created", "created", "updated"]


# --- upsert: enqueue of an id that is waiting or delayed ----------------------------------


def test_upsert_replaces_data_and_resets_failures_by_default(q: Proto) -> None:
    q.enqueue("u", "t1", {"v": 1})
    score = q.score(q.keys.ready, "u")
    q.r.hset(q.keys.job("u"), mapping={"attempts": 2, "failures": 1, "stalls": 1})
    out = q.enqueue("u", "t2", {"v": 2})
    assert (out.outcome, out.state) == ("updated", "waiting")
    job = q.job("u")
    assert (job["task"], job["data"]) == ("t2", '{"v":2}')
    # the failure budget is given back; the history of runs and stalls is kept (issue 15)
    assert (job["attempts"], job["failures"], job["stalls"]) == ("2", "0", "1")
    assert q.score(q.keys.ready, "u") == score  # keeps its place in line
    assert q.members(q.keys.ready) == ["u"]
    assert q.events("updated") == [{"event": "updated", "id": "u", "state": "waiting"}]


def test_upsert_without_update_data_keeps_data_and_counts(q: Proto) -> None:
    q.enqueue("u", "t1", {"v": 1})
    q.r.hset(q.keys.job("u"), "failures", 2)
    out = q.enqueue("u", "t2", {"v": 2}, update_data=False)
    assert out.outcome == "updated"
    job = q.job("u")
    assert (job["task"], job["data"], job["failures"]) == ("t1", '{"v":1}', "2")


def test_upsert_reset_counts_can_be_switched_off(q: Proto) -> None:
    q.enqueue("u", data=1)
    q.r.hset(q.keys.job("u"), mapping={"attempts": 3, "failures": 2, "stalls": 1})
    q.enqueue("u", data=2, reset_counts=False)
    job = q.job("u")
    assert (job["data"], job["attempts"], job["failures"], job["stalls"]) == ("2", "3", "2", "1")


def test_upsert_reset_counts_without_update_data(q: Proto) -> None:
    q.enqueue("u", data=1)
    q.r.hset(q.keys.job("u"), "failures", 2)
    q.enqueue("u", data=2, update_data=False, reset_counts=True)
    assert (q.job("u")["data"], q.job("u")["failures"]) == ("1", "0")


def test_upsert_option_flags_replace_only_what_they_name(q: Proto) -> None:
    q.enqueue("u", max_failures=3, max_stalls=3, min_backoff=1, max_backoff=10, priority=5)
    q.enqueue("u", max_failures=9, max_stalls=8, min_backoff=2, max_backoff=20, priority=1)
    job = q.job("u")
    assert [job[f] for f in ("max_failures", "max_stalls", "min_backoff", "max_backoff")] == [
        "3", "3", "1000", "10000",
    ]  # fmt: skip
    q.enqueue("u", max_failures=9, max_stalls=8, update_max_failures=True, update_max_stalls=True)
    q.enqueue("u", min_backoff=2, max_backoff=20, update_min_backoff=True, update_max_backoff=True)
    job = q.job("u")
    assert [job[f] for f in ("max_failures", "max_stalls", "min_backoff", "max_backoff")] == [
        "9", "8", "2000", "20000",
    ]  # fmt: skip
    assert job["priority"] == "5"  # priority is never upserted


def test_upsert_run_at_true_moves_a_waiting_job_to_scheduled(q: Proto) -> None:
    q.enqueue("u")
    now = q.now()
    out = q.enqueue("u", run_at_ms=now + 30_000)
    assert (out.outcome, out.state) == ("updated", "delayed")
    assert q.members(q.keys.ready) == []
    assert q.score(q.keys.scheduled, "u") == now + 30_000
    assert q.job("u")["state"] == "delayed"


def test_upsert_run_at_true_makes_a_delayed_job_ready_at_its_old_place(q: Proto) -> None:
    q.enqueue("first", delay=30)
    q.enqueue("second")
    out = q.enqueue("first", delay=0)
    assert (out.outcome, out.state) == ("updated", "waiting")
    assert q.members(q.keys.scheduled) == []
    assert q.members(q.keys.ready) == ["first", "second"]  # its enqueue seq, not a new one


def test_upsert_run_at_false_keeps_the_due_time(q: Proto) -> None:
    q.enqueue("w")
    q.enqueue("d", delay=30)
    due = q.score(q.keys.scheduled, "d")
    assert q.enqueue("w", delay=30, update_run_at=False).state == "waiting"
    assert q.enqueue("d", delay=0, update_run_at=False).state == "delayed"
    assert q.members(q.keys.ready) == ["w"]
    assert q.score(q.keys.scheduled, "d") == due


@pytest.mark.parametrize(
    ("rule", "offset", "moves"),
    [("if_later", 20_000, True), ("if_later", 5_000, False),
     ("if_earlier", 5_000, True), ("if_earlier", 20_000, False)],
)  # fmt: skip
def test_upsert_run_at_later_and_earlier(q: Proto, rule: str, offset: int, moves: bool) -> None:
    now = q.now()
    q.enqueue("d", run_at_ms=now + 10_000)
    out = q.enqueue("d", run_at_ms=now + offset, update_run_at=rule)
    assert (out.outcome, out.state) == ("updated", "delayed")
    expected = now + offset if moves else now + 10_000
    assert q.score(q.keys.scheduled, "d") == expected
    assert q.job("d")["run_at"] == str(expected)


def test_upsert_if_earlier_to_the_past_makes_the_job_ready(q: Proto) -> None:
    q.enqueue("d", delay=30)
    out = q.enqueue("d", delay=0, update_run_at="if_earlier")
    assert out.state == "waiting"
    assert q.members(q.keys.ready) == ["d"]
    assert q.members(q.keys.scheduled) == []


# --- finished, active and stale records ----------------------------------------------------


def test_a_finished_retained_job_is_left_alone(q: Proto) -> None:
    q.start("f")
    q.complete_one("f")
    before = q.snapshot("f")
    out = q.enqueue("f", data="new")
    assert (out.outcome, out.state) == ("exists", "completed")
    assert q.snapshot("f") == before  # not even an event


def test_enqueue_of_an_active_job_stores_a_blocked_twin(q: Proto) -> None:
    q.start("s", data=1)
    running = q.job("s")
    out = q.enqueue("s", data=2, delay=5, update_max_failures=True)
    assert (out.outcome, out.state) == ("blocked", "active")
    assert q.job("s") == running
    twin = q.twin("s")
    assert (twin["state"], twin["data"], twin["attempts"]) == ("blocked", "2", "0")
    assert int(twin["run_at"]) == int(twin["created_at"]) + 5000
    assert twin["seq"] == str(HALF + 2)
    flags = {k: v for k, v in twin.items() if k.startswith("u_")}
    assert flags == {
        "u_data": "1", "u_run_at": "1", "u_max_failures": "1", "u_max_stalls": "0",
        "u_min_backoff": "0", "u_max_backoff": "0", "u_reset": "1",
    }  # fmt: skip
    assert q.members(q.keys.blocked) == ["s"]
    assert q.score(q.keys.blocked, "s") == int(twin["created_at"])
    assert q.events("blocked") == [{"event": "blocked", "id": "s"}]


def test_a_second_enqueue_while_active_upserts_the_twin(q: Proto) -> None:
    q.start("s", data=1)
    q.enqueue("s", data=2)
    seq = q.twin("s")["seq"]
    out = q.enqueue("s", data=3)
    assert (out.outcome, out.state) == ("blocked", "active")
    assert (q.twin("s")["data"], q.twin("s")["seq"]) == ("3", seq)
    assert q.members(q.keys.blocked) == ["s"]
    assert len(q.events("blocked")) == 2


def test_create_drops_stale_finished_index_entries_of_its_id(q: Proto) -> None:
    # a record that expired by PEXPIRE left its id in `completed` / `failed`
    q.r.zadd(q.keys.completed, {"x": 1})
    q.r.zadd(q.keys.failed, {"x": 1})
    q.enqueue("x")
    assert q.score(q.keys.completed, "x") is None
    assert q.score(q.keys.failed, "x") is None
    q.start("other", priority=0)
    q.complete_one("other")  # sweeps expired entries: must not touch x
    assert q.job("x")["state"] == "waiting"


def test_enqueue_does_not_change_jobs_of_other_queues(q: Proto) -> None:
    other = Proto(q.r, q.name + "-other")
    other.enqueue("a", data=1)
    q.enqueue("a", data=2)
    assert other.job("a")["data"] == "1"
    assert other.members(other.keys.ready) == ["a"]


def test_a_resent_enqueue_changes_nothing_even_while_the_job_runs(q: Proto) -> None:
    spec = q.spec("a", data={"v": 1})
    assert [o.outcome for o in q.enqueue_specs([spec])] == ["created"]
    q.claim(token="t")
    again = q.enqueue_specs([spec])  # the same call re-sent after a lost reply
    assert [(o.outcome, o.state) for o in again] == [("exists", "active")]
    assert q.r.exists(q.keys.blocked_job("a")) == 0
    fresh = q.enqueue_specs([q.spec("a", data={"v": 2})])  # a new call: singleton rules
    assert [o.outcome for o in fresh] == ["blocked"]
    assert [o.outcome for o in q.enqueue_specs([q.spec("a")])] == ["blocked"]


def test_events_a_registered_reader_has_not_read_are_never_trimmed(q: Proto) -> None:
    def enqueue(prefix: str, n: int) -> None:
        specs = [q.spec(f"{prefix}{i}") for i in range(n)]
        for spec in specs:  # one call each: every call trims
            q.run(ops.enqueue(q.keys, [spec], events_maxlen=100))

    enqueue("a", 50)
    read_up_to = q.r.xrange(q.keys.events)[9][0]
    q.r.hset(q.keys.consumers, "spark-1", read_up_to)  # a reader has read 10 events
    enqueue("b", 300)
    unread = q.r.xrange(q.keys.events, min=b"(" + read_up_to)
    assert len(unread) == 40 + 300  # far past MAXLEN ~ 100, nothing unread trimmed
    q.r.delete(q.keys.consumers)  # without readers the cap applies again
    enqueue("c", 300)
    assert q.r.xlen(q.keys.events) < 300


def _generated(q: Proto, job_id: str, data: Any = None) -> ops.JobSpec:
    """A job as a producer sends one without options: its argv has no opts."""
    return dataclasses.replace(q.spec(job_id, data=data), given_id=False)


@pytest.mark.parametrize("per_call", [1, 3], ids=["one-per-call", "three-per-call"])
@pytest.mark.parametrize("data", [7, "a" * 61 + "€" + "b" * 34], ids=["short", "in-pieces"])
def test_a_first_send_writes_what_enqueue_writes(q: Proto, data: Any, per_call: int) -> None:
    """enqueue_new creates new plain jobs without looking them up; the
    records, ready order, counter, marker and events are enqueue's, whether
    a call carries one job (the script's written-out path) or several."""
    jobs = [(f"p{i}", [i, data]) for i in range(3)]
    for start in range(0, 3, per_call):
        q.clear_marker()
        assert q.enqueue_new(*jobs[start : start + per_call]) == per_call
        assert q.marker_set()  # every call wakes a worker
    # the same jobs through enqueue (an indexed job is not plain: it never goes to enqueue_new)
    general = [_generated(q, f"g{i}", data=[i, data]) for i in range(3)]
    general.append(q.spec("indexed", index={"k": "v"}))
    q.enqueue_specs(general)
    for i in range(3):
        new, old = q.stored(f"p{i}"), q.stored(f"g{i}")
        assert new.keys() == old.keys() and new.keys() >= {"state", "task", "data", "seq"}
        assert new.keys() - {"state", "task", "seq", "created_at"} == {
            k for k in old if k.startswith("data")
        }
        assert {k: v for k, v in new.items() if k.startswith("data")} == {
            k: v for k, v in old.items() if k.startswith("data")
        }
        assert (new["state"], new["task"]) == ("waiting", "t")
    assert q.members(q.keys.ready) == ["p0", "p1", "p2", "g0", "g1", "g2", "indexed"]
    assert [q.stored(f"p{i}")["seq"] for i in range(3)] == [str(HALF + n) for n in (1, 2, 3)]
    assert q.r.hget(q.keys.meta, "seq") == b"7"
    events = decode_entries(q.r.xrange(q.keys.events))
    assert [(e.name, e.job_id, e.fields["state"]) for e in events[:3]] == [
        ("created", f"p{i}", "waiting") for i in range(3)
    ]
    # one `created` entry per call (§11), and created_at is the server time of that entry
    assert len({e.stream_id for e in events[:3]}) == 3 // per_call
    for i in range(3):
        assert q.stored(f"p{i}")["created_at"] == events[i].stream_id.split("-")[0]
    (job,) = q.claim().jobs
    assert (job.id, json.loads(job.data)) == ("p0", [0, data])


def test_a_lost_first_send_is_resent_through_enqueue_and_changes_nothing(q: Proto) -> None:
    new = ops.enqueue_new(q.keys, [(f"p{i}", "t", "null") for i in range(3)], events_maxlen=100)
    assert q.run(new) == 3
    q.claim()  # p0 runs now
    events, seq = q.r.xlen(q.keys.events), q.r.hget(q.keys.meta, "seq")
    again = ops.decode_enqueue(q.run(ops.resend_of_new(q.keys, new)))  # its reply was lost
    assert [(o.outcome, o.state) for o in again] == [
        ("exists", "active"), ("exists", "waiting"), ("exists", "waiting"),
    ]  # fmt: skip
    assert (q.r.xlen(q.keys.events), q.r.hget(q.keys.meta, "seq")) == (events, seq)
    assert q.members(q.keys.ready) == ["p1", "p2"]
    assert q.stored("p0")["state"] == "active"


def test_a_first_send_that_never_arrived_is_created_by_its_resend(q: Proto) -> None:
    new = ops.enqueue_new(q.keys, [("p0", "t", "1"), ("p1", "t", "2")], events_maxlen=100)
    again = ops.decode_enqueue(q.run(ops.resend_of_new(q.keys, new)))
    assert [(o.outcome, o.state) for o in again] == [("created", "waiting")] * 2
    assert q.members(q.keys.ready) == ["p0", "p1"]
    assert "req" not in q.stored("p0")  # a generated id's record has no request id


def test_first_sends_trim_the_stream_every_64_jobs_but_never_unread_events(q: Proto) -> None:
    def enqueue(prefix: str, n: int) -> None:
        for i in range(n):  # one call each
            q.run(ops.enqueue_new(q.keys, [(f"{prefix}{i}", "t", "0")], events_maxlen=100))

    enqueue("a", 50)
    read_up_to = q.r.xrange(q.keys.events)[9][0]
    q.r.hset(q.keys.consumers, "spark-1", read_up_to)  # a reader has read 10 events
    enqueue("b", 300)
    assert len(q.r.xrange(q.keys.events, min=b"(" + read_up_to)) == 40 + 300
    q.r.delete(q.keys.consumers)
    enqueue("c", 300)
    # trimmed to about 100 (whole stream nodes of 100 entries), at least every 64 jobs
    assert q.r.xlen(q.keys.events) <= 100 + 100 + 64


@pytest.mark.parametrize("data", ["0", "x" * 100], ids=["short data", "data in pieces"])
def test_first_sends_of_several_jobs_trim_the_stream_too(q: Proto, data: str) -> None:
    # calls of 3 jobs take the script's paths after the single job's: each ends in the trim
    for c in range(100):
        jobs = [(f"j{c}-{k}", "t", data) for k in range(3)]
        assert q.run(ops.enqueue_new(q.keys, jobs, events_maxlen=100)) == 3
    assert q.r.hget(q.keys.meta, "seq") == b"300"
    assert q.r.xlen(q.keys.events) <= 100 + 100 + 64
    assert q.stored("j99-2")["state"] == "waiting"

"""claim.lua: promotion of due jobs, leasing in ready order, pause, orphans."""

from __future__ import annotations

import dataclasses
import time
import uuid

import pytest
import redis

from conveyor.protocol import ops

from .harness import HALF, MAXLEN, SEQ_SPAN, Proto


def test_claim_leases_the_first_ready_job(q: Proto) -> None:
    """Without ARGV[8] (a client that predates the compact reply): the full
    reply, 17 fields a job, defaults written out."""
    q.enqueue("a", "send", {"n": 1}, priority=3, max_failures=5, timeout=2)
    created = int(q.job("a")["created_at"])
    call = q.claim_call(1, token="t0k", worker="w-9", lease_ms=4_000, compact=False)
    assert len(call.args) == 7
    raw = q.run(call)
    now = int(raw[0])
    assert (int(raw[1]), int(raw[2])) == (-1, 0)
    assert list(raw[3:]) == [
        b"a", b"send", b'{"n":1}', 1, b"0", b"0", b"5", b"3", b"1000", b"300000", b"2000",
        b"3", str(created).encode(), None, None, None, None,
    ]  # fmt: skip
    job = q.job("a")
    assert (job["state"], job["token"], job["worker"]) == ("active", "t0k", "w-9")
    assert (job["attempts"], job["started_at"]) == ("1", str(now))
    assert q.score(q.keys.active, "a") == now + 4_000
    assert q.members(q.keys.ready) == []
    assert q.events("active") == [{"event": "active", "id": "a", "attempt": "1", "worker": "w-9"}]


def test_claim_decodes_to_typed_fields(q: Proto) -> None:
    q.enqueue("a", data=[1], priority=2, max_stalls=4, min_backoff=0.25)
    reply = q.claim()
    (job,) = reply.jobs
    assert (job.id, job.task, job.data, job.attempts) == ("a", "t", b"[1]", 1)
    assert (job.failures, job.stalls, job.max_stalls, job.min_backoff_ms) == (0, 0, 4, 250)
    assert (job.priority, job.timeout_ms) == (2, 300_000)
    assert reply.next_due_ms is None
    assert abs(reply.now_ms - q.now()) < 1_000


def test_claim_takes_at_most_count_in_ready_order(q: Proto) -> None:
    for job_id, prio in (("a", 5), ("b", 1), ("c", 5), ("d", 0)):
        q.enqueue(job_id, priority=prio)
    assert q.claimed_ids(3) == ["d", "b", "a"]
    assert q.members(q.keys.ready) == ["c"]
    assert sorted(q.members(q.keys.active)) == ["a", "b", "d"]


def test_marker_is_set_only_while_jobs_remain_ready(q: Proto) -> None:
    q.enqueue("a")
    q.enqueue("b")
    q.clear_marker()
    assert q.claimed_ids(1) == ["a"]
    assert q.marker_set()  # another idle worker should come
    q.clear_marker()
    assert q.claimed_ids(5) == ["b"]
    assert not q.marker_set()


def test_a_claim_that_used_its_turn_on_stale_ids_still_wakes_the_next_worker(q: Proto) -> None:
    """A worker may block right after a claim that returned fewer jobs than asked (§8 step 2):
    so ids taken off `ready` and dropped (stale, corrupt) count like leased ones, or the job
    behind them would wait for the next enqueue."""
    q.enqueue("gone")
    q.enqueue("stale")
    q.enqueue("next")
    q.r.delete(q.keys.job("gone"))
    q.r.hset(q.keys.job("stale"), "state", "completed")
    q.clear_marker()
    assert q.claimed_ids(2) == []
    assert q.marker_set()
    q.clear_marker()  # the next worker's BZPOPMIN
    assert q.claimed_ids(2) == ["next"]
    assert not q.marker_set()


def test_claim_on_an_empty_queue_returns_the_time_only(q: Proto) -> None:
    before = q.now()
    raw = q.run(q.claim_call(10))
    assert len(raw) == 3 and int(raw[1]) == -1
    assert before <= int(raw[0]) <= q.now()
    assert q.events() == []


def test_next_due_is_the_earliest_scheduled_time(q: Proto) -> None:
    now = q.now()
    q.enqueue("late", run_at_ms=now + 90_000)
    q.enqueue("soon", run_at_ms=now + 40_000)
    q.enqueue("ready")
    reply = q.claim(5)
    assert [j.id for j in reply.jobs] == ["ready"]
    assert reply.next_due_ms == now + 40_000


def test_due_jobs_are_promoted_and_claimed(q: Proto) -> None:
    q.enqueue("d", delay=0.05)
    assert q.claim().jobs == []
    time.sleep(0.07)
    reply = q.claim()
    assert [j.id for j in reply.jobs] == ["d"]
    assert q.members(q.keys.scheduled) == []
    assert reply.next_due_ms is None


def test_jobs_due_at_the_same_ms_keep_their_enqueue_order(q: Proto) -> None:
    due = q.now() + 80
    for job_id in ("m", "c", "x", "a"):  # not in lexical order: the zset ties sort by id
        q.enqueue(job_id, run_at_ms=due)
    time.sleep(0.1)
    assert q.claimed_ids(4) == ["m", "c", "x", "a"]


def test_promoted_jobs_take_their_priority_place(q: Proto) -> None:
    now = q.now()
    q.enqueue("urgent", priority=0, run_at_ms=now + 60)
    q.enqueue("normal", priority=5)
    q.enqueue("early", priority=5, run_at_ms=now - 1)  # already due: ready at once
    time.sleep(0.08)
    assert q.claimed_ids(3) == ["urgent", "normal", "early"]
    assert q.ready_score("urgent") == 0 * SEQ_SPAN + HALF + 1


def test_promotion_is_bounded_per_call(q: Proto) -> None:
    now = q.now()
    for job_id in ("a", "b", "c"):
        q.enqueue(job_id, run_at_ms=now - 10)
    # put them back into `scheduled` as if they were still waiting to come due
    for job_id in ("a", "b", "c"):
        q.r.zrem(q.keys.ready, job_id)
        q.r.zadd(q.keys.scheduled, {job_id: now - 10})
        q.r.hset(q.keys.job(job_id), "state", "delayed")
    reply = q.claim(0, promote=2)
    assert reply.jobs == []
    assert q.members(q.keys.ready) == ["a", "b"]
    assert q.members(q.keys.scheduled) == ["c"]
    assert q.job("a")["state"] == "waiting"
    assert reply.next_due_ms == now - 10


def test_a_due_record_without_a_seq_is_promoted_not_stranded(q: Proto) -> None:
    # Only corruption leaves a record without `seq`; it must still run (at seq 0), not stay
    # `delayed` outside every index. An id with no record at all is dropped.
    q.r.hset(q.keys.job("bare"), mapping={"state": "delayed", "task": "t", "data": "1"})
    q.r.zadd(q.keys.scheduled, {"bare": q.now() - 1, "ghost": q.now() - 1})
    reply = q.claim(2)
    assert [j.id for j in reply.jobs] == ["bare"]
    assert q.members(q.keys.scheduled) == []
    assert q.job("bare")["state"] == "active"
    assert q.job("ghost") == {}


def test_paused_queue_claims_and_promotes_nothing(q: Proto) -> None:
    now = q.now()
    q.enqueue("a")
    q.enqueue("d", run_at_ms=now + 50)
    q.r.hset(q.keys.meta, "paused", "1")
    time.sleep(0.06)
    reply = q.claim(5)
    assert reply.jobs == []
    # no next due time while paused: "d" is overdue, so a due time would be in
    # the past and every idle worker would claim again at once, forever
    assert reply.next_due_ms is None
    assert q.members(q.keys.ready) == ["a"]
    assert q.members(q.keys.scheduled) == ["d"]
    assert q.job("a")["state"] == "waiting"
    q.r.hdel(q.keys.meta, "paused")
    assert q.claimed_ids(5) == ["a", "d"]


def test_a_ready_id_without_a_record_is_failed_with_a_reason(q: Proto) -> None:
    q.r.zadd(q.keys.ready, {"ghost": 0})
    q.enqueue("real")
    reply = q.claim(2)
    assert [j.id for j in reply.jobs] == ["real"]
    job = q.job("ghost")
    assert (job["state"], job["error"]) == ("failed", "job record missing")
    assert int(job["finished_at"]) == reply.now_ms
    assert q.score(q.keys.failed, "ghost") == reply.now_ms + 86_400_000
    assert 86_000_000 < q.ttl_ms(q.keys.job("ghost")) <= 86_400_000
    assert q.events("failed") == [{"event": "failed", "id": "ghost", "error": "job record missing"}]
    assert q.members(q.keys.ready) == []


def test_a_stale_ready_entry_is_dropped_and_its_record_left_alone(q: Proto) -> None:
    q.start("a")
    q.complete_one("a")
    finished = q.job("a")
    q.r.zadd(q.keys.ready, {"a": 0})
    assert q.claim().jobs == []
    assert q.job("a") == finished
    assert q.members(q.keys.ready) == []
    assert q.events("active") == [{"event": "active", "id": "a", "attempt": "1", "worker": "w1"}]


def test_a_corrupt_record_is_returned_with_missing_fields(q: Proto) -> None:
    """Missing options read as the record defaults; task, data, created_at as nil."""
    q.r.hset(q.keys.job("bad"), mapping={"state": "waiting", "priority": 0, "seq": 1})
    q.r.zadd(q.keys.ready, {"bad": 1})
    (job,) = q.claim().jobs
    assert (job.id, job.task, job.data, job.attempts) == ("bad", None, None, 1)
    assert (job.max_failures, job.timeout_ms, job.created_at_ms) == (3, 300_000, None)
    assert q.job("bad")["state"] == "active"


def test_attempts_count_every_claim(q: Proto) -> None:
    q.enqueue("a", min_backoff=0)
    q.claim(token="t1")
    assert q.fail("a", "t1") == "retried"
    (job,) = q.claim(token="t2").jobs
    assert job.attempts == 2
    assert q.job("a")["token"] == "t2"


def test_a_suspect_waits_for_a_worker_that_runs_nothing_else(q: Proto) -> None:
    q.enqueue("s")
    q.enqueue("a")
    q.r.hset(q.keys.job("s"), "stalls", 1)
    busy = ops.decode_claim(q.run(ops.claim(
        q.keys, worker_id="w", count=5, lease_ms=10_000, token="t", promote=1,
        events_maxlen=100, alone=False,
    )))  # fmt: skip
    assert (busy.jobs, busy.held) == ([], True)  # held back, and the rest behind it too
    assert q.members(q.keys.ready) == ["s", "a"]
    idle = q.claim(5)  # alone
    assert ([j.id for j in idle.jobs], idle.held) == (["s"], False)


def test_a_job_that_stalled_before_is_claimed_alone(q: Proto) -> None:
    for job_id in ("s", "a", "b"):
        q.enqueue(job_id)
    q.r.hset(q.keys.job("s"), "stalls", 1)
    assert q.claimed_ids(3) == ["s"]  # a suspect first: claimed, the rest put back
    assert q.members(q.keys.ready) == ["a", "b"]
    q.enqueue("c")
    q.r.hset(q.keys.job("b"), "stalls", 2)
    assert q.claimed_ids(3) == ["a"]  # a suspect later in the batch: it and the rest wait
    assert q.members(q.keys.ready) == ["b", "c"]
    assert q.claimed_ids(3) == ["b"]
    assert q.claimed_ids(3) == ["c"]


def test_ids_a_suspect_stops_at_stay_ready_with_their_scores(q: Proto) -> None:
    # claim reads the ready ids and removes only those it handled (§6.2): the suspect met
    # after a lease, and every id after it, keep their place and score
    for job_id in ("a", "s", "b"):
        q.enqueue(job_id)
    q.enqueue("p", priority=0)  # runs first
    scores = {m: q.score(q.keys.ready, m) for m in ("s", "b")}
    q.r.hset(q.keys.job("s"), "stalls", 1)
    assert q.claimed_ids(4) == ["p", "a"]
    assert q.members(q.keys.ready) == ["s", "b"]
    assert {m: q.score(q.keys.ready, m) for m in ("s", "b")} == scores


def test_corrupt_records_fail_with_a_reason_and_the_rest_are_claimed(q: Proto) -> None:
    for job_id in ("ok1", "zombie", "count", "ok2"):
        q.enqueue(job_id)
    q.r.hset(q.keys.job("zombie"), "state", "zombie")
    q.r.hset(q.keys.job("count"), "attempts", "many")
    assert q.claimed_ids(4) == ["ok1", "ok2"]
    assert q.job("zombie")["error"] == "corrupt record: unknown state 'zombie'"
    assert q.job("count")["error"] == "corrupt record: attempts or stalls is not a number"
    assert set(q.members(q.keys.failed)) == {"zombie", "count"}


def test_decode_claim_takes_odd_fields_one_by_one() -> None:
    """The one-call decoding of claim.lua's bytes-or-nil fields, and the
    field-by-field one for anything else, give the same jobs."""
    usual = [b"a", b"send", b"{}", 1, b"0", b"0", b"5", b"3", b"1000", b"300000", b"2000",
             b"3", b"1700000000000", b"sch", b'{"h":"v"}', b'{"c":1}',
             b"1800000000000"]  # fmt: skip
    odd = [b"b", "send", "{}", b"2", 0, b"x", None, b"3", b"1000", b"300000", 2000,
           None, b"1700000000000", 7, None, "[1]", None]  # fmt: skip
    reply = ops.decode_claim([b"5", b"-1", 0, *usual, *odd], compact=False)
    first, second = reply.jobs
    assert (reply.now_ms, reply.next_due_ms) == (5, None)
    assert first == ops.ClaimedJob(
        "a", "send", b"{}", 1, 0, 0, 5, 3, 1000, 300000, 2000, 3, 1700000000000,
        "sch", '{"h":"v"}', b'{"c":1}', 1800000000000,
    )  # fmt: skip
    assert second == ops.ClaimedJob(
        "b", "send", b"{}", 2, 0, None, None, 3, 1000, 300000, 2000, None, 1700000000000,
        "7", None, b"[1]", None,
    )  # fmt: skip


def test_decode_claim_parses_thousands_of_distinct_values() -> None:
    job = [b"a", b"t", b"{}", 1, b"0", b"0", b"5", b"3", b"1000", b"300000", None, None,
           None, None, None, None, None]  # fmt: skip
    reply: list[object] = [b"5", b"-1", 0]
    for n in range(3000):  # every job its own timeout
        reply += [*job[:10], str(n).encode(), *job[11:]]
    jobs = ops.decode_claim(reply, compact=False).jobs
    assert [j.timeout_ms for j in jobs] == list(range(3000))
    assert {j.max_backoff_ms for j in jobs} == {300000}


# --- the compact reply (ARGV[8] = 1, protocol §6.2) ---------------------------------------

# The 12 fields the compact reply may leave out, in the order of its `present` bits: the
# record field, a value other than its default, the ClaimedJob attribute, and that value decoded.
OPTIONAL = [
    ("failures", "2", "failures", 2),
    ("stalls", "1", "stalls", 1),
    ("max_failures", "9", "max_failures", 9),
    ("max_stalls", "8", "max_stalls", 8),
    ("min_backoff", "5", "min_backoff_ms", 5),
    ("max_backoff", "6000", "max_backoff_ms", 6000),
    ("timeout", "7000", "timeout_ms", 7000),
    ("priority", "4", "priority", 4),
    ("schedule", "s1", "schedule", "s1"),
    ("headers", '{"a":1}', "headers", '{"a":1}'),
    ("checkpoint", '{"c":2}', "checkpoint", b'{"c":2}'),
    ("expires_at", "99999999999999", "expires_at_ms", 99999999999999),
]


def test_the_compact_reply_leaves_out_what_is_at_its_default(q: Proto) -> None:
    q.enqueue("a", "send", {"n": 1}, priority=3, max_failures=5, timeout=2)
    q.enqueue_new(("b", [2]))
    created = [int(q.job(job_id)["created_at"]) for job_id in ("a", "b")]
    call = q.claim_call(2)
    assert call.args[7] == 1
    raw = q.run(call)
    assert (int(raw[1]), int(raw[2])) == (-1, 0)
    assert list(raw[3:]) == [
        b"a", b"send", b'{"n":1}', 1, str(created[0]).encode(), 4 | 64 | 128, b"5", b"2000", b"3",
        b"b", b"t", b"[2]", 1, str(created[1]).encode(), 0,
    ]  # fmt: skip
    # ARGV[8] = 0 is the full reply, as when it is absent
    q.enqueue("c")
    call = q.claim_call(1, compact=False)
    raw = q.run(ops.Call(call.script, call.keys, (*call.args, 0)))
    assert len(raw) == 3 + ops.CLAIM_ARITY and raw[3] == b"c"


@pytest.mark.parametrize("k", range(len(OPTIONAL)))
def test_a_field_off_its_default_is_in_the_compact_reply(q: Proto, k: int) -> None:
    """One optional field set at a time: its bit alone, its value, and nothing else changed."""
    field, value, attr, decoded = OPTIONAL[k]
    for job_id in ("plain", "a"):
        q.enqueue(job_id)
    q.r.hset(q.keys.job("a"), field, value)
    plain = q.claim().jobs[0]
    raw = q.run(q.claim_call(1))
    assert raw[3 + 5] == 1 << k
    assert list(raw[3 + ops.COMPACT_FIXED :]) == [value.encode()]
    (job,) = ops.decode_claim(raw).jobs
    expected = dataclasses.replace(plain, id="a", created_at_ms=job.created_at_ms)
    setattr(expected, attr, decoded)
    assert job == expected


def test_a_field_stored_at_its_default_decodes_as_when_left_out(q: Proto) -> None:
    for job_id in ("plain", "a"):
        q.enqueue(job_id)
    q.r.hset(q.keys.job("a"), mapping={"failures": "0", "priority": "1000", "timeout": "300000"})
    plain = q.claim().jobs[0]
    (job,) = q.claim().jobs
    assert job == dataclasses.replace(plain, id="a", created_at_ms=job.created_at_ms)


def _copy_queue(source: Proto, target: Proto) -> None:
    """Every key of `source` under `target`'s name: the same records, indexes and times."""
    for key in source.r.scan_iter(match=source.keys.base + "*", count=1000):
        name = key.decode().replace(source.keys.base, target.keys.base, 1)
        source.r.restore(name, 0, source.r.dump(key))


def _drain(q: Proto, *, compact: bool) -> list[list[ops.ClaimedJob]]:
    batches = []
    while batch := q.claim(10, compact=compact).jobs:
        batches.append(batch)
    return batches


def test_the_compact_and_the_full_reply_decode_to_the_same_jobs(q: Proto) -> None:
    """Jobs with every option at its default and with every one set, through the
    scripts that set them, claimed from two copies of one queue in either form."""
    now = q.now()
    for job_id in ("retried", "resumed", "stalled"):
        q.enqueue(job_id)
    assert q.claimed_ids(3, token="t1", lease_ms=60_000) == ["retried", "resumed", "stalled"]
    assert q.fail("retried", "t1", retry_delay_ms=0) == "retried"
    assert q.run(ops.checkpoint(q.keys, job_id="resumed", token="t1", state='{"c":1}')) == 1
    q.run(ops.defer(q.keys, [("resumed", "t1", 0, "")], events_maxlen=MAXLEN))
    q.r.zadd(q.keys.active, {"stalled": 0})  # its lease ran out: the reaper takes it back
    assert q.reap().recovered == 1
    q.enqueue_new(("plain", {"n": 1}), ("long", "x" * 300))
    q.enqueue("defaults")
    q.enqueue(
        "every", "send", {"n": 2}, priority=3, max_failures=5, max_stalls=4, min_backoff=0.25,
        max_backoff=60, timeout=2, headers={"h": "v"}, expires=3600,
    )  # fmt: skip
    q.schedule("sched", now, every_ms=60_000, priority=2)
    copy = Proto(q.r, q.name + "-full")
    _copy_queue(q, copy)

    compact, full = _drain(q, compact=True), _drain(copy, compact=False)
    assert compact == full
    jobs = {job.id: job for batch in compact for job in batch}
    assert len(jobs) == 8
    assert jobs["retried"].failures == 1
    assert jobs["resumed"].checkpoint == b'{"c":1}'
    assert jobs["stalled"].stalls == 1
    assert jobs["long"].data == b'"' + b"x" * 300 + b'"'
    every = jobs["every"]
    assert (every.priority, every.max_failures, every.max_stalls) == (3, 5, 4)
    assert (every.min_backoff_ms, every.max_backoff_ms, every.timeout_ms) == (250, 60_000, 2_000)
    assert every.headers == '{"h":"v"}' and every.expires_at_ms is not None
    (tick,) = [job for job in jobs.values() if job.schedule == "sched"]
    assert tick.priority == 2


def test_decode_claim_reads_odd_fields_of_the_compact_reply_one_by_one() -> None:
    """Odd values (text, numbers) in the compact reply decode as in the full one."""
    full = [b"b", "send", "{}", b"2", 0, b"x", None, b"3", b"1000", b"300000", 2000,
            None, b"1700000000000", 7, None, "[1]", None]  # fmt: skip
    # failures (bit 0) is 0 (a number); stalls b"x" and the rest: as the full reply has them
    compact = [b"b", "send", "{}", b"2", b"1700000000000", 1 | 2 | 4 | 64 | 128 | 256 | 1024,
               0, b"x", None, 2000, None, 7, "[1]"]  # fmt: skip
    # a corrupt record's nil task, data and created_at
    full += [b"c", None, None, 1, b"0", b"0", b"3", b"3", b"1000", b"300000", b"300000",
             b"1000", None, None, None, None, None]  # fmt: skip
    compact += [b"c", None, None, 1, None, 0]
    as_full = ops.decode_claim([b"5", b"-1", 0, *full], compact=False).jobs
    as_compact = ops.decode_claim([b"5", b"-1", 0, *compact]).jobs
    assert as_compact == as_full and len(as_full) == 2
    plain = [b"a", b"t", b"{}", 1, b"1700000000000", 0]
    with pytest.raises(ValueError, match="unknown fields"):
        ops.decode_claim([b"5", b"-1", 0, *plain[:5], 1 << 12, b"v"])
    with pytest.raises(ValueError, match="cut short"):
        ops.decode_claim([b"5", b"-1", 0, *plain[:5], 1 | 2, b"v"])
    (job,) = ops.decode_claim([b"5", b"-1", 0, *plain]).jobs
    assert job == ops.ClaimedJob("a", "t", b"{}", 1, 0, 0, 3, 3, 1000, 300_000, 300_000, 1000,
                                 1700000000000)  # fmt: skip


def test_claim_keeps_active_a_skiplist_and_no_reader_sees_how(q: Proto) -> None:
    """Up to 128 entries Redis would keep `active` as a listpack, where each lease's ZADD and
    ZREM scans the list: a claim that may lease 16 or more converts it, leaving only the
    leases in it, and again whenever it was made anew (emptied) or loaded back as a
    listpack (a restart, a slot migration: here a DUMP and RESTORE)."""
    ids = [f"j{n:02d}" for n in range(70)]
    for job_id in ids:
        q.enqueue(job_id)
    first = q.claimed_ids(16)
    assert first == ids[:16]
    assert q.r.object("encoding", q.keys.active) == b"skiplist"
    assert q.members(q.keys.active) == first
    assert q.complete_one(first[0]) is True
    assert q.r.object("encoding", q.keys.active) == b"skiplist"  # a removal leaves it so
    assert all(q.complete(*[(job_id, "tok", "1") for job_id in first[1:]]))
    assert not q.r.exists(q.keys.active)  # emptied: the next claim makes it anew

    assert q.claimed_ids(2) == ids[16:18]  # a small claim leaves it as Redis made it
    assert q.r.object("encoding", q.keys.active) in (b"listpack", b"ziplist")
    assert q.claimed_ids(16) == ids[18:34]
    assert q.r.object("encoding", q.keys.active) == b"skiplist"
    leases = q.r.zrange(q.keys.active, 0, -1, withscores=True)
    q.r.restore(q.keys.active, 0, q.r.dump(q.keys.active), replace=True)
    assert q.r.object("encoding", q.keys.active) in (b"listpack", b"ziplist")
    assert q.claimed_ids(16) == ids[34:50]
    assert q.r.object("encoding", q.keys.active) == b"skiplist"
    assert q.r.zrange(q.keys.active, 0, 17, withscores=True) == leases
    assert q.members(q.keys.active)[18:] == ids[34:50]


def test_a_claim_whose_acl_denies_object_leases_all_the_same(
    q: Proto, redis_client: redis.Redis, redis_url: str
) -> None:
    """Keeping `active` a skiplist is speed only: a user whose ACL denies OBJECT claims the
    same jobs, and the key stays as Redis makes it."""
    user, password = f"noobj-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    redis_client.execute_command(
        "ACL", "SETUSER", user, "on", f">{password}", "~*", "&*", "+@all", "-object"
    )
    limited = redis.Redis.from_url(redis_url.replace("redis://", f"redis://{user}:{password}@"))
    try:
        with pytest.raises(redis.exceptions.NoPermissionError):
            limited.object("encoding", q.keys.ready)
        lq = Proto(limited, q.name)
        ids = [f"j{n:02d}" for n in range(20)]
        for job_id in ids:
            lq.enqueue(job_id)
        assert lq.claimed_ids(16) == ids[:16]
        assert q.members(q.keys.active) == ids[:16]
        assert q.r.object("encoding", q.keys.active) in (b"listpack", b"ziplist")
    finally:
        limited.close()
        redis_client.execute_command("ACL", "DELUSER", user)


def test_a_claim_of_several_jobs_writes_one_active_entry_naming_them_in_order(q: Proto) -> None:
    """§11: one entry per call, `ids` and `attempts` space-separated in claim order."""
    for job_id in ("a", "b", "c"):
        q.enqueue(job_id)
    assert q.claimed_ids(2, token="t1") == ["a", "b"]
    assert q.fail("b", "t1", retry_delay_ms=0) == "retried"
    second = q.claim(5, token="t2", worker="w-7").jobs
    assert sorted(j.id for j in second) == ["b", "c"]
    entries = q.events("active")
    assert entries == [
        {"event": "active", "ids": "a b", "attempts": "1 1", "worker": "w1"},
        {
            "event": "active",
            "ids": " ".join(j.id for j in second),
            "attempts": " ".join(str(j.attempts) for j in second),
            "worker": "w-7",
        },
    ]
    assert {j.id: j.attempts for j in second} == {"b": 2, "c": 1}


def test_a_claims_one_entry_counts_once_against_maxlen(q: Proto) -> None:
    """§11: `maxlen` counts entries, and a claim of 200 adds one (`~` trims whole nodes of
    100 entries)."""
    for i in range(250):
        q.enqueue(f"j{i}")  # 250 `created` entries: nodes of 100, 100 and 50
    reply = q.run(
        ops.claim(
            q.keys, worker_id="w1", count=200, lease_ms=30_000, token="t", promote=0,
            events_maxlen=100,
        )
    )  # fmt: skip
    assert len(ops.decode_claim(reply).jobs) == 200
    # 251 entries: the first node goes, the rest (151) is not over 100 by a whole node
    assert q.r.xlen(q.keys.events) == 151
    assert len(q.events("active")[0]["ids"].split()) == 200


def test_a_worker_that_isolates_suspects_leases_one_beside_its_other_jobs(q: Proto) -> None:
    # ARGV[7] = 2: at most one suspect per call, wherever it stands, and the call goes on
    for job_id in ("a", "s1", "b", "s2", "c"):
        q.enqueue(job_id)
    for suspect in ("s1", "s2"):
        q.r.hset(q.keys.job(suspect), "stalls", 1)
    reply = q.claim(5, isolates=True)
    assert [j.id for j in reply.jobs] == ["a", "s1", "b", "c"]
    assert reply.held  # s2 was met and left
    assert q.members(q.keys.ready) == ["s2"]
    assert q.job("s2")["state"] == "waiting"


def test_a_worker_running_a_suspect_steps_over_the_others(q: Proto) -> None:
    # ARGV[7] = 3: suspects keep their place and score; the jobs around them are claimed
    for job_id in ("s1", "a", "s2", "b", "c"):
        q.enqueue(job_id)
    scores = {m: q.score(q.keys.ready, m) for m in ("s1", "s2")}
    for suspect in ("s1", "s2"):
        q.r.hset(q.keys.job(suspect), "stalls", 1)
    reply = q.claim(2, isolates=True, alone=False)
    assert ([j.id for j in reply.jobs], reply.held) == (["a", "b"], True)
    assert q.members(q.keys.ready) == ["s1", "s2", "c"]
    assert {m: q.score(q.keys.ready, m) for m in ("s1", "s2")} == scores
    assert q.claimed_ids(5, isolates=True, alone=False) == ["c"]
    assert q.claimed_ids(5, isolates=True) == ["s1"]  # a worker free of suspects takes one


def test_only_suspects_ready_leave_a_busy_worker_empty_handed_and_no_wake(q: Proto) -> None:
    q.enqueue("s")
    q.r.hset(q.keys.job("s"), "stalls", 1)
    q.r.delete(q.keys.marker)
    reply = q.claim(5, isolates=True, alone=False)
    assert (reply.jobs, reply.held) == ([], True)
    assert q.r.zcard(q.keys.marker) == 0  # no wake: workers running a suspect would spin


def test_suspects_stepped_over_in_groups_go_back_to_their_group(q: Proto) -> None:
    q.enqueue("g1", group="g")
    q.enqueue("s", group="h")
    q.enqueue("g2", group="g")
    q.r.hset(q.keys.job("s"), "stalls", 1)
    reply = q.claim(5, isolates=True, alone=False)
    assert sorted(j.id for j in reply.jobs) == ["g1", "g2"]
    assert q.members(q.keys.group_ready("h")) == ["s"]
    assert "h" in q.members(q.keys.groups)
    assert q.claimed_ids(5, isolates=True) == ["s"]
    assert q.job("s")["state"] == "active"

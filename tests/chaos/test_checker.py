"""The checker's excuse for two accepted completions: only a second run the ledger shows
after the first one ended (a blocked twin) is excused; overlapping runs are a fencing failure
even for an id that was enqueued again while it ran (issue 15). And when runs of one id
overlap in the ledger (`chaos/races.py`)."""

from __future__ import annotations

import redis
from chaos.checker import stalled_at, tally
from chaos.ledger import Entry
from chaos.races import Span, after_a_stall, clashing, overlaps
from chaos_support import ROOT  # noqa: F401  (puts chaos/ on the path)

from conveyor.protocol.keys import QueueKeys


def _entry(kind: str, job_id: str, mono: float, *, pid: int = 0, attempt: int = 0) -> Entry:
    return Entry(kind, job_id, attempt, pid, mono, mono, "")


def _record(client: redis.Redis, queue: str, job_id: str, *events: str) -> None:
    keys = QueueKeys("conveyor", queue)
    client.hset(keys.job(job_id), mapping={"state": "completed"})
    for event in events:
        client.xadd(keys.events, {"event": event, "id": job_id})


def test_a_twin_run_after_the_first_ended_is_excused(
    redis_client: redis.Redis, queue_name: str
) -> None:
    _record(redis_client, queue_name, "a", "blocked", "completed", "completed")
    ledger = [
        _entry("enq", "a", 0.0),
        _entry("start", "a", 1.0, pid=10, attempt=1),
        _entry("finish", "a", 2.0, pid=10, attempt=1),
        _entry("start", "a", 3.0, pid=11, attempt=1),  # the twin, once the first run ended
        _entry("finish", "a", 4.0, pid=11, attempt=1),
    ]
    t = tally(ledger, redis_client, queue_name)
    assert (t.twins, t.double_acks) == (["a"], [])


def test_overlapping_runs_both_accepted_are_a_fencing_failure_despite_a_twin(
    redis_client: redis.Redis, queue_name: str
) -> None:
    _record(redis_client, queue_name, "b", "blocked", "completed", "completed")
    ledger = [
        _entry("enq", "b", 0.0),
        _entry("start", "b", 1.0, pid=10, attempt=1),
        _entry("start", "b", 1.5, pid=11, attempt=2),  # a re-run while the first still ran
        _entry("finish", "b", 2.0, pid=10, attempt=1),
        _entry("finish", "b", 2.5, pid=11, attempt=2),
    ]
    t = tally(ledger, redis_client, queue_name)
    assert (t.twins, t.double_acks) == ([], ["b"])


def test_more_completions_than_finished_runs_are_a_fencing_failure(
    redis_client: redis.Redis, queue_name: str
) -> None:
    _record(redis_client, queue_name, "c", "blocked", "completed", "completed")
    ledger = [
        _entry("enq", "c", 0.0),
        _entry("start", "c", 1.0, pid=10, attempt=1),
        _entry("finish", "c", 2.0, pid=10, attempt=1),
    ]
    assert tally(ledger, redis_client, queue_name).double_acks == ["c"]


def _clashes(*entries: Entry) -> int:
    starts = [e for e in entries if e.kind == "start"]
    finishes = [e for e in entries if e.kind == "finish"]
    ends = [e for e in entries if e.kind in ("kill", "dead")]
    return overlaps(starts, finishes, ends)


def test_runs_one_after_the_other_do_not_overlap() -> None:
    assert (
        _clashes(
            _entry("start", "a", 1.0, pid=10, attempt=1),
            _entry("finish", "a", 2.0, pid=10, attempt=1),
            _entry("start", "a", 2.5, pid=10, attempt=1),  # the same process runs it again
            _entry("finish", "a", 3.0, pid=10, attempt=1),
            _entry("start", "a", 3.5, pid=11, attempt=2),
            _entry("finish", "a", 4.0, pid=11, attempt=2),
        )
        == 0
    )


def test_a_run_that_began_before_the_last_one_ended_overlaps() -> None:
    assert (
        _clashes(
            _entry("start", "a", 1.0, pid=10, attempt=1),
            _entry("start", "a", 1.5, pid=11, attempt=1),
            _entry("finish", "a", 2.0, pid=10, attempt=1),
            _entry("finish", "a", 2.5, pid=11, attempt=1),
        )
        == 1
    )


def test_a_run_that_never_finished_and_was_not_killed_overlaps_every_later_run() -> None:
    assert (
        _clashes(
            _entry("start", "a", 1.0, pid=10, attempt=1),
            _entry("start", "a", 5.0, pid=11, attempt=1),
            _entry("finish", "a", 6.0, pid=11, attempt=1),
        )
        == 1
    )


def test_a_killed_run_ends_at_the_kill_and_a_run_begun_while_the_signal_landed_at_death() -> None:
    killed_then_run_elsewhere = (
        _entry("start", "a", 1.0, pid=10, attempt=1),
        _entry("kill", "w0", 2.0, pid=10),
        _entry("dead", "w0", 2.2, pid=10),
        _entry("start", "a", 4.0, pid=11, attempt=1),
        _entry("finish", "a", 4.5, pid=11, attempt=1),
    )
    assert _clashes(*killed_then_run_elsewhere) == 0
    # the victim claimed "b" after the harness wrote `kill`, before the signal landed
    claimed_in_the_instant = (
        _entry("kill", "w0", 2.0, pid=10),
        _entry("start", "b", 2.1, pid=10, attempt=1),
        _entry("dead", "w0", 2.2, pid=10),
        _entry("start", "b", 4.0, pid=11, attempt=1),
        _entry("finish", "b", 4.5, pid=11, attempt=1),
    )
    assert _clashes(*claimed_in_the_instant) == 0
    # without the death entry that run has no known end: the later run overlaps it
    assert _clashes(*[e for e in claimed_in_the_instant if e.kind != "dead"]) == 1
    # a run elsewhere that began before the death still overlaps the dying one
    assert _clashes(*claimed_in_the_instant[:3], _entry("start", "b", 2.15, pid=11, attempt=1)) == 1


def test_an_overlap_is_excused_only_when_the_lease_expired_between_the_starts(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # The CI case: a worker starved of CPU past its 2 s lease kept two handlers suspended
    # (no finish); the reaper marked them stalled and they ran again.
    keys = QueueKeys("conveyor", queue_name)
    redis_client.xadd(keys.events, {"event": "stalled", "id": "a"}, id="1000002000-0")
    redis_client.xadd(keys.events, {"event": "completed", "id": "b"}, id="1000002001-0")
    stalls = stalled_at(redis_client, queue_name)
    assert stalls == {"a": [1000002.0]}
    starved = Span(10, 1, 1.0, float("inf"), begin_wall=1000000.0)
    rerun = Span(11, 2, 3.0, 3.2, begin_wall=1000002.01)
    assert clashing([starved, rerun]) == [(starved, rerun)]
    assert after_a_stall((starved, rerun), stalls["a"])
    assert not after_a_stall((starved, rerun), [])  # no stall: an overlap
    too_early = Span(11, 2, 1.5, 1.7, begin_wall=1000000.5)  # began before the lease expired
    assert not after_a_stall((starved, too_early), stalls["a"])

"""The checker's excuse for two accepted completions: only a second run the ledger shows
after the first one ended (a blocked twin) is excused; overlapping runs are a fencing failure
even for an id that was enqueued again while it ran (issue 15)."""

from __future__ import annotations

import redis
from chaos.checker import tally
from chaos.ledger import Entry
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

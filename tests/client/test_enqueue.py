"""Enqueue, upsert, bulk enqueue, cancel and inspection, through both clients."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from conveyor import JobRequest, JobState, Queue, QueueSettings
from conveyor.errors import ValidationError
from conveyor.options import PRIORITIES, JobDefaults


def test_enqueue_creates_a_waiting_job_with_defaults(queue: Any) -> None:
    done = queue.enqueue("send", {"to": "a@example.com"})
    assert (done.outcome, done.state) == ("created", JobState.WAITING)
    job = queue.get(done.id)
    assert job.state is JobState.WAITING
    assert (job.task, job.data) == ("send", {"to": "a@example.com"})
    assert (job.attempts, job.failures, job.stalls) == (0, 0, 0)
    assert (job.max_failures, job.max_stalls, job.priority) == (3, 3, PRIORITIES["normal"])
    assert job.created_at is not None and job.started_at is None
    assert queue.counts()[JobState.WAITING] == 1


def test_a_queue_s_own_defaults_reach_jobs_enqueued_without_options(
    redis_url: str, queue_name: str
) -> None:
    """A job without options normally goes as id, task and data alone; a
    queue whose defaults differ from the protocol's sends them with it."""
    settings = QueueSettings(defaults=JobDefaults(max_failures=7, priority=PRIORITIES["high"]))
    with (
        Queue(queue_name, url=redis_url, settings=settings) as own,
        Queue(queue_name, url=redis_url) as plain,
    ):
        mine, other = own.enqueue("t", 1), plain.enqueue("t", 2)
        assert (own.get(mine.id).max_failures, own.get(mine.id).priority) == (7, PRIORITIES["high"])
        assert (plain.get(other.id).max_failures, plain.get(other.id).priority) == (
            3, PRIORITIES["normal"],
        )  # fmt: skip


def test_enqueue_with_every_option_is_stored(queue: Any) -> None:
    done = queue.enqueue(
        "t",
        [1, 2],
        id="job-1",
        priority="high",
        max_failures=7,
        max_stalls=2,
        min_backoff=0.5,
        max_backoff=60,
        timeout=timedelta(seconds=9),
        result_ttl=120,
    )
    job = queue.get("job-1")
    assert done.id == "job-1"
    assert (job.priority, job.max_failures, job.max_stalls) == (0, 7, 2)
    assert (job.min_backoff, job.max_backoff, job.timeout, job.result_ttl) == (0.5, 60, 9, 120)


def test_delay_and_run_at_make_delayed_jobs(queue: Any) -> None:
    later = queue.enqueue("t", None, delay=60)
    at = queue.enqueue("t", None, run_at=datetime.now(UTC) + timedelta(minutes=5))
    past = queue.enqueue("t", None, run_at=datetime.now(UTC) - timedelta(minutes=5))
    assert later.state is JobState.DELAYED and at.state is JobState.DELAYED
    assert past.state is JobState.WAITING
    job = queue.get(at.id)
    assert job.run_at > datetime.now(UTC) + timedelta(minutes=4)
    assert queue.counts()[JobState.DELAYED] == 2


def test_enqueue_of_a_waiting_id_updates_it(queue: Any) -> None:
    queue.enqueue("t", {"v": 1}, id="same")
    again = queue.enqueue("t", {"v": 2}, id="same")
    assert again.outcome == "updated"
    assert queue.get("same").data == {"v": 2}
    kept = queue.enqueue("t", {"v": 3}, id="same", update_data=False)
    assert kept.outcome == "updated"
    assert queue.get("same").data == {"v": 2}
    assert queue.counts()[JobState.WAITING] == 1


def test_update_run_at_rules(queue: Any) -> None:
    queue.enqueue("t", None, id="d", delay=100)
    first = queue.get("d").run_at
    queue.enqueue("t", None, id="d", delay=500, update_run_at="if_earlier")
    assert queue.get("d").run_at == first
    queue.enqueue("t", None, id="d", delay=500, update_run_at="if_later")
    assert queue.get("d").run_at > first
    queue.enqueue("t", None, id="d", update_run_at=False)
    assert queue.get("d").state is JobState.DELAYED
    moved = queue.enqueue("t", None, id="d")
    assert moved.state is JobState.WAITING
    assert queue.counts()[JobState.DELAYED] == 0


def test_enqueue_many_validates_everything_first(queue: Any, redis_client: redis.Redis) -> None:
    jobs = [JobRequest("t", i, {"id": f"j{i}"}) for i in range(1200)]
    done = queue.enqueue_many(jobs, chunk_size=500)
    assert [d.id for d in done] == [f"j{i}" for i in range(1200)]
    assert queue.counts()[JobState.WAITING] == 1200
    # the queue's own keys: the session's server also holds other tests' expiring keys
    pattern = f"*{{{queue.name}}}*"
    before = sorted(redis_client.scan_iter(match=pattern, count=1000))
    with pytest.raises(ValidationError):
        queue.enqueue_many([("t", 1), ("t", float("nan"))])
    assert sorted(redis_client.scan_iter(match=pattern, count=1000)) == before


def test_enqueue_many_gives_each_job_its_own_random_id(queue: Any) -> None:
    """Generated ids of a batch come from one urandom draw: 16 characters of base64."""
    done = queue.enqueue_many([("t", i) for i in range(600)] + [JobRequest("t", 0, {"id": "x"})])
    ids = [d.id for d in done]
    assert ids[-1] == "x" and len(set(ids)) == 601
    assert all(re.fullmatch(r"[A-Za-z0-9_.]{16}", i) for i in ids[:-1])
    assert [queue.get(i).data for i in ids[:3]] == [0, 1, 2]
    assert queue.counts()[JobState.WAITING] == 601
    # the first chunk went to enqueue_new, the second (with a given id) to enqueue: one FIFO
    assert queue.job_ids(JobState.WAITING, offset=490, limit=20) == ids[490:510]
    assert queue.job_ids(JobState.WAITING, offset=590, limit=20) == ids[590:]


def test_enqueue_many_of_plain_jobs_in_chunks_keeps_order_and_data(queue: Any) -> None:
    """Jobs without options go as enqueue_new calls built from their ids,
    tasks and data alone, chunk by chunk; long data is stored in pieces."""
    long = "é" * 100  # 200 bytes: pieces
    done = queue.enqueue_many([("t", i) for i in range(1200)] + [("t", long)], chunk_size=500)
    ids = [d.id for d in done]
    assert len(set(ids)) == 1201
    assert {(d.outcome, d.state, d.queue) for d in done} == {
        ("created", JobState.WAITING, queue.name)
    }
    assert queue.job_ids(JobState.WAITING, offset=495, limit=10) == ids[495:505]
    assert queue.job_ids(JobState.WAITING, offset=995, limit=10) == ids[995:1005]
    assert [queue.get(i).data for i in (ids[0], ids[499], ids[500], ids[1199])] == [
        0,
        499,
        500,
        1199,
    ]
    assert queue.get(ids[-1]).data == long


def test_enqueue_many_refuses_a_bad_chunk_size_and_writes_nothing(
    queue: Any, redis_client: redis.Redis
) -> None:
    before = redis_client.dbsize()
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValidationError, match="chunk_size"):
            queue.enqueue_many([("t", 1)], chunk_size=bad)
    assert redis_client.dbsize() == before
    assert queue.enqueue_many([], chunk_size=500) == []


def test_enqueue_many_sends_a_queue_s_own_defaults_with_plain_jobs(
    redis_url: str, queue_name: str
) -> None:
    settings = QueueSettings(defaults=JobDefaults(max_failures=7))
    with Queue(queue_name, url=redis_url, settings=settings) as own:
        done = own.enqueue_many([("t", 1), ("t", 2)])
        assert [own.get(d.id).max_failures for d in done] == [7, 7]


def test_cancel_removes_waiting_and_delayed_jobs(queue: Any) -> None:
    queue.enqueue("t", None, id="w")
    queue.enqueue("t", None, id="d", delay=60)
    assert queue.cancel("w") is True
    assert queue.cancel("d") is True
    assert queue.cancel("w") is False
    assert queue.cancel("never") is False
    assert queue.get("w") is None
    assert sum(queue.counts().values()) == 0


def test_get_of_a_missing_job_is_none(queue: Any) -> None:
    assert queue.get("nope") is None


def test_events_record_creation(queue: Any) -> None:
    done = queue.enqueue("t", None)
    events = queue.events(after="0-0")
    assert [(e.name, e.job_id) for e in events] == [("created", done.id)]
    assert events[0].fields["state"] == "waiting"
    assert events[0].at is not None
    assert queue.events(after=events[-1].stream_id) == []


def test_pause_and_resume_are_recorded(queue: Any, redis_client: redis.Redis) -> None:
    queue.pause()
    meta = queue.core.keys.meta if hasattr(queue, "core") else queue.inner.core.keys.meta
    assert redis_client.hget(meta, "paused") == b"1"
    queue.enqueue("t", None)  # producers keep enqueueing
    queue.resume()
    assert redis_client.hget(meta, "paused") is None


def test_job_ids_list_a_state_in_index_order(queue: Any) -> None:
    for name, prio in [("b", 5), ("a", 1), ("c", 9)]:
        queue.enqueue("t", None, id=name, priority=prio)
    queue.enqueue("t", None, id="later", delay=60)
    assert queue.job_ids(JobState.WAITING) == ["a", "b", "c"]
    assert queue.job_ids("waiting", offset=1, limit=1) == ["b"]
    assert queue.job_ids("delayed") == ["later"]
    assert queue.job_ids("failed") == []
    with pytest.raises(ValidationError):
        queue.job_ids("sleeping")


def test_schedules_through_both_clients(queue: Any) -> None:
    job_id = queue.schedule("every-minute", "tick", {"n": 1}, every=60, priority="high")
    assert job_id.startswith("every-minute@")
    job = queue.get(job_id)
    assert (job.state, job.priority, job.data) == (JobState.DELAYED, 0, {"n": 1})
    assert [s.id for s in queue.schedules()] == ["every-minute"]
    assert queue.unschedule("every-minute") is True
    assert queue.schedules() == [] and queue.get(job_id) is None


def test_groups_lists_groups_with_waiting_jobs(queue: Any) -> None:
    queue.enqueue("t", None, group="tenant-b")
    queue.enqueue("t", None, group="tenant-a")
    queue.pause_group("tenant-c")
    queue.enqueue("t", None, group="tenant-c")
    queue.enqueue("t", None)
    assert queue.groups() == ["tenant-a", "tenant-b", "tenant-c"]

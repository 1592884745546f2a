"""What operators' tools read and write beside the jobs: latency, the audit
trail, and quiet / stop sent to a real worker (through Queue and AsyncQueue)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis

from conveyor import JobState, Queue
from conveyor.client import operators
from conveyor.client.operators import AUDIT_READ
from conveyor.client.tasks import Tasks
from conveyor.errors import ValidationError, WorkerNotFoundError
from support.workers import WorkerRunner, wait_until


def test_latency_is_how_long_the_next_job_has_waited(queue: Any) -> None:
    assert queue.latency() is None
    queue.enqueue("t", 1)
    time.sleep(0.3)
    queue.enqueue("t", 2, group="g1")  # a group's head counts too, but waited less
    waited = queue.latency()
    assert waited is not None and 0.3 <= waited < 10


def test_latency_counts_a_group_s_head(queue: Any) -> None:
    queue.enqueue("t", 1, group="g1")
    time.sleep(0.2)
    waited = queue.latency()
    assert waited is not None and waited >= 0.2


def test_the_audit_trail_reads_newest_first(queue: Any) -> None:
    assert queue.audit() == []
    queue.record_audit(who="ann", action="retry", target="j1", outcome="retried j1",
                       source="dashboard")  # fmt: skip
    queue.record_audit(who="bob", action="purge", target="failed", outcome="removed 3")
    entries = queue.audit(count=10)
    assert [(e.who, e.action, e.target, e.outcome) for e in entries] == [
        ("bob", "purge", "failed", "removed 3"), ("ann", "retry", "j1", "retried j1"),
    ]  # fmt: skip
    assert entries[1].source == "dashboard" and entries[0].source == "api"
    assert entries[0].at.tzinfo is not None
    assert len(queue.audit(count=1)) == 1


def test_bad_audit_input_is_refused_and_writes_nothing(queue: Any) -> None:
    with pytest.raises(ValidationError):
        queue.record_audit(who=None, action="x", target="y", outcome="z")
    for count in (0, AUDIT_READ + 1, True):
        with pytest.raises(ValidationError):
            queue.audit(count=count)
    assert queue.audit() == []


def test_the_audit_trail_is_capped(
    sync_queue: Queue, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(operators, "AUDIT_KEPT", 10)
    for n in range(300):
        sync_queue.record_audit(who="w", action="a", target=str(n), outcome="o")
    # MAXLEN ~ trims whole stream nodes (100 entries by default)
    assert redis_client.xlen(sync_queue.core.keys.audit) <= 110
    assert sync_queue.audit(count=1)[0].target == "299"


def test_commands_to_an_unknown_worker_are_refused(queue: Any) -> None:
    with pytest.raises(WorkerNotFoundError):
        queue.quiet_worker("no-such-worker")
    with pytest.raises(WorkerNotFoundError):
        queue.stop_worker("no-such-worker")


def _slow_tasks(redis_url: str, queue_name: str) -> Tasks:
    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task
    async def slow(data: int) -> int:
        await asyncio.sleep(0.4)
        return data

    return tasks


def test_a_quiet_busy_worker_finishes_its_jobs_and_claims_no_more(
    redis_url: str, queue_name: str, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    for n in range(2):
        sync_queue.enqueue("slow", n)
    running = worker_runner.start(_slow_tasks(redis_url, queue_name), concurrency=2,
                                  heartbeat_interval=0.2)  # fmt: skip
    wait_until(lambda: sync_queue.counts()[JobState.ACTIVE] == 2)
    (worker,) = sync_queue.workers()
    sync_queue.quiet_worker(worker.id)  # busy: the heartbeat reads the command
    wait_until(lambda: sync_queue.counts()[JobState.COMPLETED] == 2, timeout=20)
    wait_until(lambda: sync_queue.workers()[0].info.get("quiet") is True, timeout=20)
    sync_queue.enqueue("slow", 3)
    time.sleep(1.0)  # ten heartbeats: a claim would have taken it
    assert sync_queue.counts()[JobState.WAITING] == 1
    assert running.thread.is_alive()
    info = sync_queue.workers()[0].info
    assert info["rss"] > 1_000_000 and info["cpu"] >= 0


def test_stop_ends_an_idle_worker_at_once(
    redis_url: str, queue_name: str, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    running = worker_runner.start(_slow_tasks(redis_url, queue_name), heartbeat_interval=5.0)
    wait_until(lambda: sync_queue.workers(), timeout=20)
    (worker,) = sync_queue.workers()
    started = time.monotonic()
    sync_queue.stop_worker(worker.id)  # idle: its blocking wait pops the command
    running.thread.join(20)
    assert not running.thread.is_alive()
    assert time.monotonic() - started < 4.0  # before its next heartbeat (5 s), not after
    assert sync_queue.workers() == []


def test_promote_all_runs_every_delayed_job_now(queue: Any) -> None:
    for n in range(3):
        queue.enqueue("t", n, delay=3600)
    queue.enqueue("t", 9)
    assert queue.promote_all(batch=2) == 3
    counts = queue.counts()
    assert counts[JobState.DELAYED] == 0 and counts[JobState.WAITING] == 4
    assert queue.promote_all() == 0
    with pytest.raises(ValidationError):
        queue.promote_all(batch=0)


def test_job_fields_reads_some_fields_of_many_records(queue: Any) -> None:
    a = queue.enqueue("send", {"to": "a"})
    b = queue.enqueue("charge", 2)
    found = queue.job_fields([a.id, "no-such-job", b.id], "task", "error")
    assert found == [{"task": "send"}, {}, {"task": "charge"}]
    with pytest.raises(ValidationError):
        queue.job_fields(["bad id"], "task")

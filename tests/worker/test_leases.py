"""Leases, heartbeats, fencing, stalled-job recovery, waking and shutdown."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import redis

from conveyor import JobState, Queue
from conveyor.client.tasks import Tasks
from conveyor.client.transport import SyncRunner
from conveyor.errors import JobFailedError
from conveyor.protocol import ops
from conveyor.worker import current_job
from support.workers import WorkerRunner, wait_until


@pytest.fixture
def tasks(redis_url: str, queue_name: str) -> Tasks:
    return Tasks(queue_name, url=redis_url)


def _claim_and_abandon(queue: Queue, redis_client: redis.Redis, lease_ms: int) -> str:
    """Lease one job as a worker that then dies (never beats, never acks)."""
    runner = SyncRunner(redis_client, queue.core.scripts)
    call = ops.claim(
        queue.core.keys,
        worker_id="dead-worker",
        count=1,
        lease_ms=lease_ms,
        token="dead-token",
        promote=10,
        events_maxlen=1000,
    )
    return ops.decode_claim(runner.run(call)).jobs[0].id


def test_an_idle_worker_wakes_on_enqueue_without_polling(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    started: list[float] = []

    @tasks.task
    async def mark(data: float) -> None:
        started.append(time.time() - data)

    worker_runner.start(tasks, idle_wait=30)
    time.sleep(0.3)  # the worker is now blocked on Redis
    for _ in range(5):
        mark.enqueue(time.time())
        time.sleep(0.05)
    wait_until(lambda: len(started) == 5)
    assert max(started) < 0.5  # a poller with idle_wait=30 would take seconds


def test_an_idle_worker_wakes_when_a_delayed_job_is_due(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    ran: list[float] = []

    @tasks.task
    async def at(data: None) -> None:
        ran.append(time.monotonic())

    worker_runner.start(tasks, idle_wait=30)
    time.sleep(0.2)
    enqueued = time.monotonic()
    at.enqueue(None, delay=0.4)
    wait_until(lambda: ran, timeout=5)
    assert 0.35 <= ran[0] - enqueued < 1.5


def test_delayed_jobs_due_together_run_in_enqueue_order(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    order: list[int] = []

    @tasks.task
    def record(data: int) -> None:
        order.append(data)

    from datetime import UTC, datetime, timedelta

    due = datetime.now(UTC) + timedelta(seconds=0.3)
    for i in [5, 3, 9, 1, 7]:
        record.enqueue(i, run_at=due, id=f"z{i}")  # ids sort differently from enqueue order
    worker_runner.start(tasks, concurrency=1)
    wait_until(lambda: len(order) == 5)
    assert order == [5, 3, 9, 1, 7]


def test_a_cpu_hogging_handler_keeps_its_lease(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    @tasks.task
    def hog(data: float) -> int:
        end, spins = time.monotonic() + data, 0
        while time.monotonic() < end:
            spins += 1
        return spins

    @tasks.task
    async def hog_loop(data: float) -> int:  # blocks the event loop itself
        end, spins = time.monotonic() + data, 0
        while time.monotonic() < end:
            spins += 1
        return spins

    one = hog.enqueue(2.0)
    two = hog_loop.enqueue(2.0)
    worker_runner.start(tasks, lease=0.6)  # 3+ leases of busy CPU
    sync_queue.wait_result(one.id, timeout=15)
    sync_queue.wait_result(two.id, timeout=15)
    for job_id in (one.id, two.id):
        job = sync_queue.get(job_id)
        assert (job.attempts, job.stalls, job.state) == (1, 0, JobState.COMPLETED)


def test_a_dead_workers_job_is_recovered_within_about_a_lease(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner, redis_client: redis.Redis
) -> None:
    @tasks.task
    async def work(data: None) -> str:
        return f"attempt {current_job().attempt}"

    done = work.enqueue(None)
    _claim_and_abandon(sync_queue, redis_client, lease_ms=500)
    claimed_at = time.monotonic()
    worker_runner.start(tasks, lease=0.6)  # beats (and reaps) every 0.2 s
    assert sync_queue.wait_result(done.id, timeout=10) == "attempt 2"
    assert time.monotonic() - claimed_at < 0.5 + 0.6 + 1.0
    job = sync_queue.get(done.id)
    assert (job.stalls, job.attempts) == (1, 2)
    names = [e.name for e in sync_queue.events(after="0-0")]
    assert "stalled" in names


def test_a_job_that_stalls_max_stalls_times_fails_with_a_stall_error(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner, redis_client: redis.Redis
) -> None:
    @tasks.task
    async def work(data: None) -> None:
        return None

    done = sync_queue.enqueue("work", None, max_stalls=1)
    _claim_and_abandon(sync_queue, redis_client, lease_ms=200)
    worker_runner.start(tasks, lease=0.6)
    with pytest.raises(JobFailedError, match="StalledError"):
        sync_queue.wait_result(done.id, timeout=10)
    assert sync_queue.get(done.id).stalls == 1


def test_a_worker_that_lost_its_lease_cannot_write_and_stops_the_handler(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner, redis_client: redis.Redis
) -> None:
    cancelled = threading.Event()

    @tasks.task
    async def long(data: None) -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "should never be written"

    done = long.enqueue(None)
    worker_runner.start(tasks, lease=0.6)
    key = sync_queue.core.keys.job(done.id)
    wait_until(lambda: redis_client.hget(key, "state") == b"active")
    redis_client.hset(key, "token", "someone-else")  # another claim took it over
    assert cancelled.wait(5), "the handler was not stopped"
    time.sleep(0.3)
    job = sync_queue.get(done.id)
    assert job.state is JobState.ACTIVE and job.result is None


def test_graceful_stop_finishes_short_jobs_and_gives_back_long_ones(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    started = threading.Semaphore(0)

    @tasks.task
    async def short(data: None) -> str:
        started.release()
        await asyncio.sleep(0.3)
        return "done"

    @tasks.task
    async def long(data: None) -> str:
        started.release()
        await asyncio.sleep(60)
        return "never"

    s = short.enqueue(None)
    long_job = long.enqueue(None)
    queued = [short.enqueue(None, priority="low") for _ in range(3)]
    handle = worker_runner.start(tasks, concurrency=2, grace=1.0)
    assert started.acquire(timeout=5) and started.acquire(timeout=5)
    t0 = time.monotonic()
    handle.stop()
    assert time.monotonic() - t0 < 3
    assert sync_queue.get(s.id).state is JobState.COMPLETED
    back = sync_queue.get(long_job.id)
    # interrupted: it keeps its attempt, so the re-run knows it is a re-delivery
    assert (back.state, back.attempts, back.failures) == (JobState.WAITING, 1, 0)
    for job in queued:  # claimed but never started: no attempt counted
        assert (sync_queue.get(job.id).state, sync_queue.get(job.id).attempts) == (
            JobState.WAITING,
            0,
        )
    assert "released" in [e.name for e in sync_queue.events(after="0-0")]


def test_burst_mode_drains_and_exits(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    @tasks.task
    async def noop(data: int) -> int:
        return data

    sync_queue.enqueue_many([("noop", i) for i in range(500)])
    handle = worker_runner.start(tasks, burst=True, concurrency=20)
    handle.thread.join(20)
    assert not handle.thread.is_alive()
    assert sync_queue.counts()[JobState.COMPLETED] == 500
    assert handle.worker.processed == 500


def test_burst_ends_right_after_the_last_job_when_jobs_are_fewer_than_slots(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    """Issue 18: one job on ten slots used to sit out a whole idle wait (30 s here)
    blocked on Redis after the job had finished."""

    @tasks.task
    async def nap(data: int) -> int:
        await asyncio.sleep(0.3)  # still running when the next claim finds nothing
        return data

    sync_queue.enqueue("nap", 1)
    handle = worker_runner.start(tasks, burst=True, concurrency=10)  # idle_wait 30 s
    handle.thread.join(15)
    assert not handle.thread.is_alive()
    assert handle.worker.processed == 1


def test_the_roll_call_lists_live_workers_only(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    @tasks.task
    async def noop(data: None) -> None:
        return None

    handle = worker_runner.start(tasks, concurrency=3)
    workers = wait_until(sync_queue.workers)
    assert [w.id for w in workers] == [handle.worker.id]
    assert workers[0].info["concurrency"] == 3
    assert workers[0].info["tasks"] == ["noop"]
    handle.stop()
    assert sync_queue.workers() == []


def test_events_cover_the_lifecycle(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner, redis_client: Any
) -> None:
    @tasks.task(max_failures=2, min_backoff=0, max_backoff=0)
    async def once(data: None) -> None:
        if current_job().attempt == 1:
            raise RuntimeError("first")
        current_job().progress(1.0)

    @tasks.task(max_failures=1)
    async def bad(data: None) -> None:
        raise RuntimeError("always")

    a, b = once.enqueue(None), bad.enqueue(None)
    worker_runner.start(tasks)
    sync_queue.wait_result(a.id, timeout=10)
    with pytest.raises(JobFailedError):
        sync_queue.wait_result(b.id, timeout=10)
    names = {e.name for e in sync_queue.events(after="0-0", count=1000)}
    assert {"created", "active", "retried", "progress", "completed", "failed"} <= names


def test_the_events_stream_is_capped(redis_url: str, queue_name: str) -> None:
    from conveyor import QueueSettings

    with Queue(queue_name, url=redis_url, settings=QueueSettings(events_maxlen=100)) as q:
        q.enqueue_many([("t", i) for i in range(2000)])
        length = q.client.xlen(q.core.keys.events)
    assert length < 300  # MAXLEN ~ trims by whole macro nodes


def test_a_second_stop_gives_running_jobs_back_at_once(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    started = threading.Event()

    @tasks.task
    async def long(data: None) -> None:
        started.set()
        await asyncio.sleep(60)

    job = long.enqueue(None)
    handle = worker_runner.start(tasks, grace=30.0)
    assert started.wait(10)
    t0 = time.monotonic()
    handle.stop_now()  # two signals: no 30 s grace
    handle.thread.join(10)
    assert not handle.thread.is_alive() and time.monotonic() - t0 < 5
    back = sync_queue.get(job.id)
    assert (back.state, back.attempts) == (JobState.WAITING, 1)

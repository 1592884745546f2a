"""Limits and fair groups, end to end through the client and real workers."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from conveyor import JobRequest, JobState, Queue
from conveyor.client.tasks import Tasks
from conveyor.errors import ValidationError
from support.workers import WorkerRunner, wait_until


@pytest.fixture
def tasks(redis_url: str, queue_name: str) -> Tasks:
    return Tasks(queue_name, url=redis_url)


def test_one_noisy_group_does_not_starve_ten_small_ones(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    started: list[str] = []
    lock = threading.Lock()

    @tasks.task
    async def work(data: str) -> None:
        with lock:
            started.append(data)

    noisy = [JobRequest("work", "noisy", {"group": "noisy"}) for _ in range(10_000)]
    sync_queue.enqueue_many(noisy, chunk_size=1000)
    small = [JobRequest("work", f"g{g}", {"group": f"g{g}"}) for g in range(10) for _ in range(10)]
    sync_queue.enqueue_many(small)
    assert sync_queue.counts()[JobState.WAITING] == 10_100
    handle = worker_runner.start(tasks, concurrency=10)
    wait_until(lambda: sum(1 for s in started if s != "noisy") == 100, timeout=60)
    handle.stop()
    last_small = max(i for i, s in enumerate(started) if s != "noisy")
    # strict round robin serves the 10 small groups within 10 rounds of 11 groups
    print(f"the 100 small-group jobs all started within the first {last_small + 1} starts")
    assert last_small < 150, f"small groups done only after {last_small + 1} starts"
    assert sync_queue.counts()[JobState.WAITING] > 9_000  # the noisy group waited its turn


def test_a_queue_rate_limit_holds_across_workers(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    starts: list[float] = []

    @tasks.task
    async def tick(data: None) -> None:
        starts.append(time.monotonic())

    sync_queue.set_limits(rate=10, per=0.5)
    sync_queue.enqueue_many([("tick", None)] * 40)
    worker_runner.start(tasks, concurrency=10)
    worker_runner.start(tasks, concurrency=10)
    wait_until(lambda: len(starts) == 40, timeout=20)
    elapsed = starts[-1] - starts[0]
    assert elapsed >= 1.0  # 40 jobs at 10 per 0.5 s need at least 3 full windows
    for t in starts:  # no half-second anywhere holds more than 2 windows' worth
        assert sum(1 for u in starts if t <= u < t + 0.5) <= 20


def test_queue_and_group_concurrency_caps(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    running: dict[str, int] = {"all": 0, "a": 0}
    peak: dict[str, int] = {"all": 0, "a": 0}
    lock = threading.Lock()

    @tasks.task
    async def slow(data: str) -> None:
        import asyncio

        with lock:
            for key in ("all", data) if data == "a" else ("all",):
                running[key] += 1
                peak[key] = max(peak[key], running[key])
        await asyncio.sleep(0.05)
        with lock:
            for key in ("all", data) if data == "a" else ("all",):
                running[key] -= 1

    sync_queue.set_limits(concurrency=4)
    sync_queue.set_group_limits("a", concurrency=1)
    jobs = [JobRequest("slow", g, {"group": g}) for g in "abc" for _ in range(8)]
    sync_queue.enqueue_many(jobs)
    worker_runner.start(tasks, concurrency=10)
    worker_runner.start(tasks, concurrency=10)
    wait_until(lambda: sync_queue.counts()[JobState.COMPLETED] == 24, timeout=30)
    assert peak["all"] <= 4 and peak["a"] == 1


def test_pause_and_resume_a_group_and_the_queue(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    done: list[str] = []

    @tasks.task
    async def note(data: str) -> None:
        done.append(data)

    sync_queue.pause_group("tenant-a")
    sync_queue.enqueue("note", "a", group="tenant-a")
    sync_queue.enqueue("note", "b", group="tenant-b")
    worker_runner.start(tasks)
    wait_until(lambda: done == ["b"])
    time.sleep(0.2)
    assert done == ["b"]
    sync_queue.pause()
    sync_queue.resume_group("tenant-a")
    sync_queue.enqueue("note", "c")  # producers keep enqueueing while paused
    time.sleep(0.3)
    assert done == ["b"]
    sync_queue.resume()
    wait_until(lambda: sorted(done) == ["a", "b", "c"])


def test_a_paused_queue_with_overdue_delayed_jobs_does_not_wake_its_workers(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner, redis_client: Any
) -> None:
    done: list[str] = []

    @tasks.task
    async def note(data: str) -> None:
        done.append(data)

    sync_queue.pause()
    sync_queue.enqueue("note", "late", delay=0.05)
    worker_runner.start(tasks)
    time.sleep(0.5)  # the delayed job is overdue; the worker is idle

    def claims() -> int:
        stats = redis_client.info("commandstats")
        return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))

    before = claims()
    time.sleep(1.0)
    calls = claims() - before
    # blocked on the marker: only heartbeats and reaps (a few per second); a
    # worker woken by a due time in the past claims again and again (20 a second here)
    assert calls < 10, f"{calls} script calls in 1 s by an idle worker of a paused queue"
    assert done == []
    sync_queue.resume()
    wait_until(lambda: done == ["late"])


def test_limit_arguments_are_validated(sync_queue: Queue) -> None:
    for bad in ({"concurrency": 0}, {"rate": -1}, {"rate": 5, "per": 0}, {"concurrency": 1.5}):
        with pytest.raises(ValidationError):
            sync_queue.set_limits(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        sync_queue.pause_group("bad group")

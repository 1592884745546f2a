"""The roll call's figures follow the worker within about a second, between
heartbeats (a third of the lease), without a write per job."""

from __future__ import annotations

import asyncio
import threading
import time

from conveyor import Queue
from conveyor.client.tasks import Tasks
from support.workers import WorkerRunner, wait_until


def _info(queue: Queue) -> dict[str, object]:
    workers = queue.workers()
    assert len(workers) == 1
    return workers[0].info


def test_running_and_processed_are_current_between_beats(
    redis_url: str, queue_name: str, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    tasks = Tasks(queue_name, url=redis_url)
    release = threading.Event()

    @tasks.task
    async def waits(data: None) -> None:
        while not release.is_set():
            await asyncio.sleep(0.01)

    # a 60 s lease: beats every 20 s, far longer than this test waits for a figure
    worker_runner.start(tasks, concurrency=30, lease=60.0)
    wait_until(lambda: sync_queue.workers(), timeout=20)  # the first beat: running 0
    first = _info(sync_queue)
    assert first["running"] == 0
    jobs = sync_queue.enqueue_many([("waits", None)] * 25)
    start = time.monotonic()
    wait_until(lambda: _info(sync_queue)["running"] == 25, timeout=5)
    assert time.monotonic() - start < 5  # not the next beat, 20 s away
    assert _info(sync_queue)["beat_at"] == first["beat_at"]  # a refresh, not a beat
    release.set()
    for job in jobs:
        sync_queue.wait_result(job.id, timeout=20)
    wait_until(lambda: _info(sync_queue)["processed"] == 25, timeout=5)
    assert _info(sync_queue)["running"] == 0


def test_an_idle_worker_writes_nothing_between_beats(
    redis_url: str, queue_name: str, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task
    async def noop(data: None) -> None:
        return None

    worker = worker_runner.start(tasks, concurrency=4, lease=60.0)
    wait_until(lambda: sync_queue.workers(), timeout=20)
    key = worker.worker._lanes[0].queue.core.keys.worker(worker.worker.id)
    ttl = sync_queue.client.pttl(key)
    time.sleep(2.5)  # refreshes would come every second if anything moved
    assert _info(sync_queue)["processed"] == 0
    assert sync_queue.client.pttl(key) < ttl  # KEEPTTL or nothing written: never renewed


def test_an_idle_worker_of_three_queues_reports_little_cpu(
    redis_url: str, queue_name: str, worker_runner: WorkerRunner
) -> None:
    """Every queue's heartbeat reads the process's CPU; three reading at once must not
    each measure the few milliseconds since the one before (that read as ~100 %)."""
    names = [f"{queue_name}-{n}" for n in ("a", "b", "c")]
    served = [Tasks(name, url=redis_url) for name in names]
    for tasks in served:
        tasks.task(name="noop")(lambda data: None)
    worker_runner.start(served, concurrency=3, heartbeat_interval=0.2)
    readings = []
    with Queue(names[-1], url=redis_url) as queue:
        wait_until(lambda: queue.workers(), timeout=20)
        time.sleep(1.0)  # past the readings that include the worker's start
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:  # an idle worker, read about 30 times
            readings.append(float(_info(queue)["cpu"]))  # type: ignore[arg-type]
            time.sleep(0.1)
    assert max(readings) < 50, readings

"""The metrics history: written by real workers on their heartbeat, read
through both clients; bounded keys; bad windows refused."""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from conveyor import PermanentError
from conveyor.client.tasks import Tasks
from conveyor.errors import ValidationError
from conveyor.metrics import BOUNDS, RETENTION_MS, Histogram, MinuteCounts
from support.workers import WorkerRunner, spawn_worker, wait_until


def _sum(history: list[MinuteCounts]) -> tuple[int, int, int]:
    return (
        sum(m.completed for m in history),
        sum(m.failed for m in history),
        sum(m.retried for m in history),
    )


def test_workers_write_counts_and_timings_that_both_clients_read(
    redis_url: str,
    queue_name: str,
    queue: Any,
    worker_runner: WorkerRunner,
    redis_client: redis.Redis,
) -> None:
    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task
    async def ok(data: int) -> int:
        return data

    @tasks.task(max_failures=2, min_backoff=0.01, max_backoff=0.01)
    async def flaky(data: None) -> None:
        raise ValueError("boom")

    @tasks.task
    async def doomed(data: None) -> None:
        raise PermanentError("no")

    tasks.queue().enqueue_many([("ok", i) for i in range(20)])
    flaky.enqueue(None)
    doomed.enqueue(None)
    # a short heartbeat: the counts reach Redis while the worker runs
    handle = worker_runner.start(tasks, lease=1.5)

    def finished() -> bool:
        return _sum(queue.metrics_history(minutes=5)) == (20, 2, 1)

    wait_until(finished, timeout=30, interval=0.1)
    handle.stop()

    history = queue.metrics_history(minutes=5)
    assert len(history) == 5
    minutes = [m.minute for m in history]
    assert minutes == sorted(minutes) and all(m.tzinfo is UTC for m in minutes)
    assert all(b - a == timedelta(minutes=1) for a, b in zip(minutes, minutes[1:], strict=False))
    assert all(m.second == 0 and m.microsecond == 0 for m in minutes)
    assert abs(minutes[-1] - datetime.now(UTC)) < timedelta(minutes=2)
    assert len(queue.metrics_history()) == 60  # the default window, zeros around

    timings = {t.task: t for t in queue.task_timings(hours=1)}
    assert set(timings) == {"ok", "flaky", "doomed"}
    assert timings["ok"].run.count == 20 and timings["ok"].wait.count == 20
    assert timings["flaky"].run.count == 2 and timings["flaky"].wait.count == 1
    assert timings["ok"].run.bounds == BOUNDS
    assert 0 <= timings["ok"].run.sum < 20
    assert timings["ok"].wait.quantile(0.5) is not None

    totals = queue.totals()
    assert totals == {"completed": 20, "failed": 2, "retried": 1, "stalled": 0}

    prefix = f"conveyor:{{{queue_name}}}:"
    keys = [k.decode() for k in redis_client.scan_iter(match=prefix + "*")]
    hours = [k for k in keys if k.startswith((prefix + "metrics:", prefix + "timings:"))]
    assert hours, keys
    for key in hours:  # every hour's keys expire: the history is bounded
        assert 0 < redis_client.pttl(key) <= RETENTION_MS


def test_an_empty_queue_has_a_history_of_zeros(queue: Any) -> None:
    history = queue.metrics_history(minutes=3)
    assert [(m.completed, m.failed, m.retried) for m in history] == [(0, 0, 0)] * 3
    assert queue.task_timings() == []
    assert queue.totals() == {"completed": 0, "failed": 0, "retried": 0, "stalled": 0}


@pytest.mark.parametrize("minutes", [0, -1, 10081, 1.5, True, "60"])
def test_a_bad_window_is_refused(queue: Any, minutes: Any) -> None:
    with pytest.raises(ValidationError, match="minutes must be an integer"):
        queue.metrics_history(minutes=minutes)


def test_histogram_quantiles_interpolate_within_their_bucket() -> None:
    bounds = (1.0, 2.0, 4.0)
    h = Histogram(bounds, (0, 10, 10, 0), 30.0)
    assert h.count == 20 and h.mean == 1.5
    assert h.quantile(0.0) == 1.0
    assert h.quantile(0.25) == 1.5
    assert h.quantile(0.5) == 2.0
    assert h.quantile(1.0) == 4.0
    assert Histogram(bounds, (0, 0, 0, 3), 30.0).quantile(0.9) == 4.0  # above every bound
    assert Histogram(bounds, (0, 0, 0, 0), 0.0).quantile(0.5) is None
    with pytest.raises(ValidationError):
        h.quantile(1.5)


def test_a_stall_is_counted_by_the_worker_whose_reaper_found_it(
    redis_url: str, queue_name: str, sync_queue: Any, tmp_path: Any
) -> None:
    mark = tmp_path / "started"
    env = {"TEST_QUEUE": queue_name, "TEST_MARK": str(mark)}
    job = sync_queue.enqueue("sleepy", {"seconds": 1.0})
    first = spawn_worker("kill_app:tasks", redis_url, "--lease", "1", env=env)
    second = None
    try:
        wait_until(lambda: mark.exists() and str(first.pid) in mark.read_text(), timeout=20)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(5)
        second = spawn_worker("kill_app:tasks", redis_url, "--lease", "1", env=env)
        # the re-run is a suspect's, in a child process of the second worker
        assert sync_queue.wait_result(job.id, timeout=30)["pid"] != first.pid
        rerun = sync_queue.get(job.id)
        assert rerun is not None and f"-{second.pid}-" in (rerun.worker or "")
        expected = {"completed": 1, "failed": 0, "retried": 1, "stalled": 1}
        wait_until(lambda: sync_queue.totals() == expected, timeout=20, interval=0.1)
        assert _sum(sync_queue.metrics_history(minutes=5)) == (1, 0, 1)
    finally:
        for proc in (first, second):
            if proc is not None:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
                assert proc.stdout is not None
                proc.stdout.close()


def test_counts_are_written_with_the_outcomes_so_a_sigkill_loses_none(
    redis_url: str, queue_name: str, sync_queue: Any
) -> None:
    """The outcome counts are the ending scripts' own: a worker killed right after its jobs
    ended, long before its next heartbeat (20 s), leaves every one of them counted."""
    worker = spawn_worker(
        "observe_app:tasks", redis_url, "--lease", "60", env={"TEST_QUEUE": queue_name}
    )
    try:
        done = [sync_queue.enqueue("chatty", n) for n in range(20)]
        broken = [sync_queue.enqueue("broken", n) for n in range(5)]
        for job in done:
            sync_queue.wait_result(job.id, timeout=30)
        wait_until(lambda: all(sync_queue.get(j.id).state.value == "failed" for j in broken))
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(10)
        assert worker.stdout is not None
        worker.stdout.close()
    assert sync_queue.totals() == {"completed": 20, "failed": 5, "retried": 0, "stalled": 0}
    assert _sum(sync_queue.metrics_history(minutes=5)) == (20, 5, 0)

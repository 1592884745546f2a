"""Repeatable jobs: one job per tick however many workers, none lost across restarts."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from conveyor import JobState, Queue
from conveyor.client.tasks import Tasks
from conveyor.errors import UnknownOptionError, ValidationError
from conveyor.worker import current_job
from support.workers import WorkerRunner, wait_until


@pytest.fixture
def tasks(redis_url: str, queue_name: str) -> Tasks:
    return Tasks(queue_name, url=redis_url)


def test_an_interval_schedule_yields_one_job_per_tick_with_three_workers(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    ticks: list[str] = []
    lock = threading.Lock()

    @tasks.task
    async def beat(data: dict[str, str]) -> None:
        with lock:
            ticks.append(current_job().id)

    first = sync_queue.schedule("heartbeat", "beat", {"x": "y"}, every=0.25, max_failures=1)
    assert first.startswith("heartbeat@")
    for _ in range(3):
        worker_runner.start(tasks, concurrency=4)
    wait_until(lambda: len(ticks) >= 5, timeout=10)
    worker_runner.stop_all()
    assert max(Counter(ticks).values()) == 1  # no tick ran twice
    times = sorted(int(t.rsplit("@", 1)[1]) for t in ticks)
    # consecutive ticks on the 250 ms grid (a tick missed while every worker lagged
    # collapses into the next one by design, so a gap may span several)
    assert all(b > a and (b - a) % 250 == 0 for a, b in zip(times, times[1:], strict=False))
    (info,) = sync_queue.schedules()
    assert (info.id, info.task, info.data, info.every, info.cron) == (
        "heartbeat", "beat", {"x": "y"}, 0.25, None,
    )  # fmt: skip
    assert info.job_id is not None and info.job_id not in ticks  # the next one is pending
    assert sync_queue.get(info.job_id).state is JobState.DELAYED  # type: ignore[union-attr]


def test_ticks_missed_while_no_worker_ran_collapse_into_one(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    ran: list[float] = []

    @tasks.task
    async def beat(data: None) -> None:
        ran.append(time.monotonic())

    sync_queue.schedule("s", "beat", every=0.2)
    time.sleep(1.0)  # five ticks pass with no worker: the pending job just waits
    worker_runner.start(tasks)
    wait_until(lambda: len(ran) >= 3, timeout=10)
    # one catch-up run, then back on the beat: the next tick on the schedule's grid (anywhere
    # up to 0.2 s later), then one 0.2 s after it; five runs at once if the missed ticks ran
    assert ran[2] - ran[0] > 0.1


def test_replacing_and_removing_a_schedule(sync_queue: Queue) -> None:
    one = sync_queue.schedule("nightly", "report", {"v": 1}, cron="0 3 * * *")
    two = sync_queue.schedule("nightly", "report", {"v": 2}, cron="30 4 * * *")
    assert one != two and sync_queue.get(one) is None  # the old pending job is gone
    (info,) = sync_queue.schedules()
    assert (info.cron, info.data, info.job_id) == ("30 4 * * *", {"v": 2}, two)
    assert info.next_run is not None and (info.next_run.hour, info.next_run.minute) == (4, 30)
    assert sync_queue.unschedule("nightly") is True
    assert sync_queue.unschedule("nightly") is False
    assert sync_queue.schedules() == [] and sync_queue.get(two) is None


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"cron": "not a cron"}, ValidationError),
        ({}, ValidationError),
        ({"cron": "* * * * *", "every": 5}, ValidationError),
        ({"every": 0}, ValidationError),
        ({"every": 5, "delay": 3}, UnknownOptionError),
    ],
)
def test_bad_schedules_are_refused(sync_queue: Queue, kwargs: dict, error: type) -> None:
    with pytest.raises(error):
        sync_queue.schedule("s", "t", None, **kwargs)
    assert sync_queue.schedules() == []


def test_declaring_a_schedule_again_after_its_tick_ran_early(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    ran: list[str] = []

    @tasks.task
    async def report(data: None) -> None:
        ran.append(current_job().id)

    first = sync_queue.schedule("nightly", "report", cron="0 3 * * *")
    assert sync_queue.promote(first)  # "run it now"
    worker_runner.start(tasks)
    wait_until(lambda: ran == [first])
    worker_runner.stop_all()
    again = sync_queue.schedule("nightly", "report", cron="0 3 * * *")  # an app restart
    assert again != first
    assert sync_queue.get(again).state is JobState.DELAYED  # type: ignore[union-attr]

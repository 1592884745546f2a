"""Schedules as complete as BullMQ's job schedulers (protocol §16.6), through
both clients and real workers: a time zone, seconds in cron, a start and an
end, a number of runs, the next fire times readable."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from conveyor.client.tasks import Tasks
from conveyor.errors import ValidationError
from conveyor.worker import current_job
from support.workers import WorkerRunner, wait_until


def test_max_runs_ends_the_schedule_after_that_many_ticks(
    queue: Any, redis_url: str, queue_name: str, worker_runner: WorkerRunner
) -> None:
    tasks = Tasks(queue_name, url=redis_url)
    ran: list[str] = []
    lock = threading.Lock()

    @tasks.task
    def beat(data: None) -> None:
        with lock:
            ran.append(current_job().id)

    queue.schedule("thrice", "beat", every=0.2, max_runs=3)
    (info,) = queue.schedules()
    assert (info.max_runs, info.runs, len(info.upcoming)) == (3, 1, 3)
    worker_runner.start(tasks)
    wait_until(lambda: (s := queue.schedules()) and s[0].ended is not None, timeout=20)
    time.sleep(0.5)  # had it not ended, a fourth tick would be due by now
    assert len(ran) == 3 and len(set(ran)) == 3
    (info,) = queue.schedules()
    assert (info.runs, info.next_run, info.job_id, info.upcoming) == (3, None, None, ())
    assert queue.next_runs("thrice") == []


def test_a_cron_with_seconds_in_a_time_zone_and_its_next_fire_times(queue: Any) -> None:
    job_id = queue.schedule("paris", "report", cron="30 0 3 * * *", tz="Europe/Paris")
    runs = queue.next_runs("paris", count=3)
    assert len(runs) == 3 and job_id == f"paris@{round(runs[0].timestamp() * 1000)}"
    for run in runs:
        local = run.astimezone(ZoneInfo("Europe/Paris"))
        assert (local.hour, local.minute, local.second) == (3, 0, 30)
    assert all(b > a for a, b in zip(runs, runs[1:], strict=False))
    (info,) = queue.schedules()
    assert (info.tz, info.cron, info.upcoming[:3]) == ("Europe/Paris", "30 0 3 * * *", tuple(runs))


def test_start_and_end_bound_the_ticks(queue: Any) -> None:
    start = datetime.now(UTC) + timedelta(days=2)
    end = start + timedelta(minutes=2, seconds=30)
    queue.schedule("window", "t", every=60, start=start, end=end)
    runs = queue.next_runs("window", count=10)
    assert [r - runs[0] for r in runs] == [timedelta(0), timedelta(minutes=1), timedelta(minutes=2)]
    assert abs(runs[0] - start) < timedelta(milliseconds=2)
    (info,) = queue.schedules()
    assert info.start is not None and info.end is not None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"cron": "* * * *"},
        {"cron": "* * * * * * *"},
        {"cron": "0 3 * * *", "tz": "Mars/Olympus"},
        {"every": 5, "tz": "Europe/Paris"},
        {"every": 5, "max_runs": 0},
        {"every": 5, "start": datetime.now(UTC), "end": datetime.now(UTC) - timedelta(days=1)},
        {"every": 5, "end": datetime.now(UTC) - timedelta(days=1)},
    ],
)
def test_bad_schedules_write_nothing(queue: Any, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        queue.schedule("bad", "t", **kwargs)
    assert queue.schedules() == []

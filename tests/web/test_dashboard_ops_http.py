"""The operators' actions and figures over HTTP (no browser): bad bulk input is
refused and changes nothing, refusals are audited, read-only hides the new
actions, and the figures behind latency, throughput, the stuck warning and
the chart ranges."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from conveyor import JobState, Queue
from conveyor.client.inspect import Limits, QueueOverview
from conveyor.integrations.web import DashboardSettings, dashboard_app, ops
from conveyor.metrics import MinuteCounts, per_minute


@pytest.fixture
async def make() -> AsyncIterator[Any]:
    made: list[Any] = []

    def build(settings: DashboardSettings) -> Any:
        made.append(dashboard_app(settings))
        return made[-1]

    yield build
    for app in made:
        await app.state.queues.close()


def _client(app: Any) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://dash.test")


async def test_bad_bulk_input_is_refused_and_changes_nothing(
    make: Any, redis_url: str, queue_name: str, sync_queue: Queue
) -> None:
    sync_queue.enqueue("t", 1, id="later", delay=3600)
    app = make(DashboardSettings(url=redis_url, queues=(queue_name,)))
    async with _client(app) as client:
        await client.get(f"/queues/{queue_name}")
        csrf = client.cookies["conveyor_csrf"]
        act = f"/queues/{queue_name}/do/"
        empty = await client.post(act + "remove_selected", data={"csrf": csrf})
        assert empty.status_code == 400 and "select at least one job" in empty.text
        many = {"id": [f"j{n}" for n in range(1001)], "csrf": csrf}
        too_many = await client.post(act + "remove_selected", data=many)
        assert too_many.status_code == 400
        assert (await client.post(act + "quiet_worker", data={"csrf": csrf})).status_code == 400
        assert sync_queue.audit() == []  # nothing was done: nothing recorded
        refused = await client.post(act + "purge", data={"csrf": csrf, "state": "active"})
        assert refused.status_code == 303
        assert "flash-refused" in (await client.get(refused.headers["location"])).text
        stop = await client.post(act + "stop_worker", data={"csrf": csrf, "worker": "w-gone"})
        assert "flash-refused" in (await client.get(stop.headers["location"])).text
    assert sync_queue.counts()[JobState.DELAYED] == 1
    trail = sync_queue.audit()
    assert [(e.action, e.target) for e in trail] == [("stop_worker", "w-gone"),
                                                     ("purge", "active")]  # fmt: skip
    assert all(e.outcome.startswith("refused: ") for e in trail)
    assert trail[0].who.startswith("anonymous") and trail[0].source == "dashboard"


async def test_read_only_shows_none_of_the_new_actions(
    make: Any, redis_url: str, queue_name: str, sync_queue: Queue
) -> None:
    sync_queue.enqueue("t", 1, delay=3600)
    sync_queue.enqueue("t", 2)
    app = make(DashboardSettings(url=redis_url, queues=(queue_name,), read_only=True))
    async with _client(app) as client:
        for path in ("jobs/delayed", "jobs/waiting", "workers", "audit"):
            page = await client.get(f"/queues/{queue_name}/{path}")
            assert page.status_code == 200, path
            assert 'id="bulk"' not in page.text and 'type="checkbox"' not in page.text
            assert "form class=\"action\"" not in page.text


async def test_a_made_up_lane_or_name_is_404(make: Any, redis_url: str, queue_name: str) -> None:
    app = make(DashboardSettings(url=redis_url, queues=(queue_name,)))
    async with _client(app) as client:
        assert (await client.get(f"/queues/{queue_name}:failures")).status_code == 200
        for name in (f"{queue_name}:other", f"nope-{queue_name}:failures"):
            assert (await client.get(f"/queues/{name}")).status_code == 404


def _minutes(*completed: int) -> list[MinuteCounts]:
    start = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    return [MinuteCounts(datetime.fromtimestamp(start + 60 * i, UTC), completed=c, failed=0,
                         retried=0) for i, c in enumerate(completed)]  # fmt: skip


def _overview(waiting: int, *, paused: bool = False) -> QueueOverview:
    counts = dict.fromkeys(JobState, 0)
    counts[JobState.WAITING] = waiting
    return QueueOverview("q", True, paused, counts, Limits(), Limits(), [], 0)


def test_throughput_leaves_out_the_minute_still_filling() -> None:
    assert per_minute(_minutes(5, 5, 5, 5, 5, 100)) == 5.0
    assert per_minute(_minutes(10, 0)) == 2.0  # one full minute of five
    assert per_minute(_minutes(7)) == 0.0


def test_stuck_needs_backlog_workers_a_minute_s_wait_and_no_outcome() -> None:
    idle = _minutes(0, 0, 0)
    assert ops.stuck(_overview(3), 1, 61.0, idle)
    assert not ops.stuck(_overview(3), 1, 59.0, idle)  # not waited a minute yet
    assert not ops.stuck(_overview(3), 0, 61.0, idle)  # no worker: the other warning
    assert not ops.stuck(_overview(0), 1, 61.0, idle)
    assert not ops.stuck(_overview(3, paused=True), 1, 61.0, idle)
    assert not ops.stuck(_overview(3), 1, 61.0, _minutes(0, 1, 0))  # finished last minute


def test_chart_ranges_sum_minutes_into_points() -> None:
    points = ops.bucketed(_minutes(*range(20)), 10)
    assert points["completed"] == [sum(range(10)), sum(range(10, 20))]
    assert points["t"][1] - points["t"][0] == 600
    assert {width for _minutes_, width, _unit in ops.RANGES.values()} == {1, 10, 60}

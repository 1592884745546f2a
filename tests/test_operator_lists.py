"""What operators see of a queue's lists: every waiting job, grouped ones
included, with counts per group that agree, through both clients, the CLI and
the dashboard (no browser: its HTML)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from conveyor import FlowJob, JobState, Queue
from conveyor.integrations.cli import main
from conveyor.integrations.web import DashboardSettings, dashboard_app


def _cli(*args: str, url: str) -> Any:
    return CliRunner().invoke(main, [*args, "--url", url])


def _fill(queue: Queue) -> dict[str, list[str]]:
    """10 jobs in g1, 5 in g2, 3 ungrouped, enqueued interleaved."""
    order = ["g1", "g2", ""] * 3 + ["g1", "g2"] * 2 + ["g1"] * 5
    made: dict[str, list[str]] = {"": [], "g1": [], "g2": []}
    for n, group in enumerate(order):
        made[group].append(queue.enqueue("t", n, id=f"j{n}", group=group or None).id)
    return made


def test_every_waiting_job_is_listed_grouped_ones_by_group(queue: Any, sync_queue: Queue) -> None:
    made = _fill(sync_queue)
    everything = made[""] + made["g1"] + made["g2"]
    assert queue.counts()[JobState.WAITING] == 18
    assert queue.job_ids(JobState.WAITING, limit=100) == everything
    pages = [queue.job_ids("waiting", offset=o, limit=4) for o in range(0, 20, 4)]
    assert [i for p in pages for i in p] == everything
    assert queue.job_ids("waiting", reverse=True, limit=100) == everything[::-1]
    assert queue.job_ids("waiting", reverse=True, offset=15, limit=5) == everything[::-1][15:]
    assert queue.job_ids("waiting", group="g2", limit=100) == made["g2"]


def test_the_cli_lists_every_waiting_job_and_counts_a_group(
    redis_url: str, queue_name: str, sync_queue: Queue
) -> None:
    made = _fill(sync_queue)
    shown = _cli("jobs", "list", queue_name, "waiting", "--limit", "50", url=redis_url)
    assert shown.exit_code == 0, shown.output
    assert "1-18 of 18 waiting" in shown.output
    assert all(job_id in shown.output for ids in made.values() for job_id in ids)
    shown = _cli("jobs", "list", queue_name, "waiting", "--group", "g2", url=redis_url)
    assert shown.exit_code == 0 and "1-5 of 5 waiting" in shown.output, shown.output
    rows = json.loads(
        _cli("jobs", "list", queue_name, "--group", "g1", "--json", url=redis_url).output
    )
    assert [r["id"] for r in rows] == made["g1"] and {r["group"] for r in rows} == {"g1"}
    missing = _cli("jobs", "list", queue_name, "waiting", "--group", "nope", url=redis_url)
    assert missing.exit_code == 1 and "no group 'nope'" in missing.output
    kid = FlowJob(task="t", options={"id": "kid", "delay": 3600})
    sync_queue.enqueue_flow(FlowJob(task="t", options={"id": "parent"}, children=[kid]))
    waiting_parents = _cli("jobs", "list", queue_name, "waiting_children", url=redis_url)
    assert waiting_parents.exit_code == 0 and "1-1 of 1 waiting_children" in waiting_parents.output


@pytest.fixture
async def dashboard(redis_url: str, queue_name: str) -> AsyncIterator[httpx.AsyncClient]:
    app = dashboard_app(DashboardSettings(url=redis_url, queues=(queue_name,), page_size=4))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://dash.test") as client:
        yield client
    await app.state.queues.close()


async def test_the_dashboard_pages_through_every_waiting_job(
    dashboard: httpx.AsyncClient, queue_name: str, sync_queue: Queue
) -> None:
    made = _fill(sync_queue)
    everything = made[""] + made["g1"] + made["g2"]
    seen: list[str] = []
    for page in range(1, 6):
        html = (await dashboard.get(f"/queues/{queue_name}/jobs/waiting?page={page}")).text
        assert "18 waiting job(s)" in html and f"page {page} of 5" in html
        seen += [i for i in everything if f">{i}</a>" in html]
    assert sorted(seen) == sorted(everything) and len(seen) == 18
    html = (await dashboard.get(f"/queues/{queue_name}/jobs/waiting?group=g2")).text
    assert "5 waiting job(s)" in html and "page 1 of 2" in html

"""One job as operators see it, in the dashboard (its HTML) and `conveyor jobs
show`: every run from the record whatever the events stream kept, progress
collapsed to its latest value, a waiting job after a stall without the dead
run's details as current, and the blocked twin of a running singleton."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis
from click.testing import CliRunner

from conveyor import FlowJob, JobState, Queue
from conveyor.client.models import JobRequest, QueueSettings
from conveyor.client.tasks import Tasks
from conveyor.client.transport import SyncRunner
from conveyor.integrations.cli import main
from conveyor.integrations.web import DashboardSettings, dashboard_app
from conveyor.protocol import ops
from conveyor.worker import current_job
from support.workers import WorkerRunner


def _cli(*args: str, url: str) -> Any:
    return CliRunner().invoke(main, [*args, "--url", url])


@pytest.fixture
async def dashboard(redis_url: str, queue_name: str) -> AsyncIterator[httpx.AsyncClient]:
    app = dashboard_app(DashboardSettings(url=redis_url, queues=(queue_name,)))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://dash.test") as client:
        yield client
    await app.state.queues.close()


def _page(html: str, title: str) -> str:
    """The section of the job page after the heading `title`, to the next heading."""
    return html.split(f"<h2>{title}</h2>", 1)[1].split("<h2>", 1)[0]


def _rows(section: str) -> list[str]:
    return re.findall(r"<tr>(.*?)</tr>", section, flags=re.S)


def test_runs_come_from_the_record_after_the_stream_forgot_them(
    redis_url: str, queue_name: str, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    # a short stream: 300 later enqueues push the job's events out of it
    tasks = Tasks(queue_name, url=redis_url, settings=QueueSettings(events_maxlen=100))

    @tasks.task(max_failures=3, min_backoff=0.01, max_backoff=0.01)
    def flaky(data: None) -> str:
        if current_job().attempt < 3:
            raise ValueError(f"attempt {current_job().attempt} failed")
        return "ok"

    tasks.queue().enqueue("flaky", None, id="flaky-1")
    worker_runner.start(tasks, lease=3.0)
    assert sync_queue.wait_result("flaky-1", timeout=30) == "ok"
    later = [JobRequest("later", n, {"delay": 3600}) for n in range(300)]
    tasks.queue().enqueue_many(later)
    assert not any(e.job_id == "flaky-1" for e in sync_queue.events(after="0", count=1000))

    shown = json.loads(_cli("jobs", "show", queue_name, "flaky-1", "--json", url=redis_url).output)
    runs = shown["runs"]
    assert [r["outcome"] for r in runs] == ["failed", "failed", "completed"]
    assert [r["attempt"] for r in runs] == [1, 2, 3]
    assert "attempt 1 failed" in runs[0]["error"] and runs[2]["error"] is None
    assert all(r["worker"] and r["started_at"].endswith("+00:00") for r in runs)
    assert shown["created_at"].endswith("+00:00")  # ISO 8601, UTC
    text = _cli("jobs", "show", queue_name, "flaky-1", url=redis_url).output
    assert "#1  failed" in text and "#3  completed" in text and " UTC" in text
    assert "'" not in text.split("runs:")[0]  # data and result as JSON, not a Python repr


async def test_the_job_page_shows_every_run_and_one_progress(
    dashboard: httpx.AsyncClient, redis_url: str, queue_name: str, worker_runner: WorkerRunner
) -> None:
    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task(max_failures=2, min_backoff=0.01, max_backoff=0.01)
    def long(data: None) -> None:
        for n in range(60):
            current_job().progress(n, 60)
        if current_job().attempt == 1:
            raise ValueError("first run failed")

    tasks.queue().enqueue("long", None, id="long-1")
    worker_runner.start(tasks, lease=3.0)
    await _settled(dashboard, queue_name, "long-1")
    html = (await dashboard.get(f"/queues/{queue_name}/job?id=long-1")).text
    runs = _rows(_page(html, "Runs"))[1:]
    assert len(runs) == 2 and "failed" in runs[0] and "completed" in runs[1]
    assert "first run failed" in runs[0]
    events = _page(html, "Recent events")
    assert events.count(">progress<") == 1
    assert ">created<" in events and ">active<" in events and ">completed<" in events


async def _settled(dashboard: httpx.AsyncClient, queue_name: str, job_id: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        html = (await dashboard.get(f"/queues/{queue_name}/job?id={job_id}")).text
        if "badge state-completed" in html:
            return
        time.sleep(0.1)
    raise AssertionError(f"{job_id} did not complete")


def _runner(queue: Queue, redis_client: redis.Redis) -> SyncRunner:
    return SyncRunner(redis_client, queue.core.scripts)


def _claim(queue: Queue, redis_client: redis.Redis, lease_ms: int, worker: str) -> list[str]:
    claim = ops.claim(
        queue.core.keys, worker_id=worker, count=10, lease_ms=lease_ms, token="t", promote=10,
        events_maxlen=100,
    )  # fmt: skip
    return [j.id for j in ops.decode_claim(_runner(queue, redis_client).run(claim)).jobs]


async def test_a_waiting_job_after_a_stall_shows_no_dead_run_as_current(
    dashboard: httpx.AsyncClient, redis_url: str, queue_name: str, sync_queue: Queue,
    redis_client: redis.Redis,
) -> None:  # fmt: skip
    sync_queue.enqueue("t", None, id="stalled-1", max_stalls=3)
    assert _claim(sync_queue, redis_client, lease_ms=50, worker="dead-worker") == ["stalled-1"]
    keys = sync_queue.core.keys
    _runner(sync_queue, redis_client).run(
        ops.progress(keys, job_id="stalled-1", token="t", value=0.58, events_maxlen=100)
    )
    time.sleep(0.1)
    _runner(sync_queue, redis_client).run(ops.reap(keys, batch=10, events_maxlen=100))
    job = sync_queue.get("stalled-1")
    assert job is not None and job.state is JobState.WAITING and job.progress == 0.58
    html = (await dashboard.get(f"/queues/{queue_name}/job?id=stalled-1")).text
    assert "58 %" not in html and "<progress" not in html
    assert "last run’s worker" in html and "last run started" in html
    (run,) = _rows(_page(html, "Runs"))[1:]
    assert "stalled" in run and "dead-worker" in run
    text = _cli("jobs", "show", queue_name, "stalled-1", url=redis_url).output
    assert "0.58" not in text.split("runs:")[0] and "#1  stalled" in text


async def test_the_blocked_list_and_the_job_show_the_blocked_twin(
    dashboard: httpx.AsyncClient, redis_url: str, queue_name: str, sync_queue: Queue,
    redis_client: redis.Redis,
) -> None:  # fmt: skip
    sync_queue.enqueue("t", {"n": 1}, id="single")
    assert _claim(sync_queue, redis_client, lease_ms=60_000, worker="w") == ["single"]
    assert sync_queue.enqueue("t", {"n": "next"}, id="single").outcome == "blocked"
    listed = (await dashboard.get(f"/queues/{queue_name}/jobs/blocked")).text
    (row,) = _rows(listed.split("<tbody>", 1)[1])
    assert "state-blocked" in row and "state-active" not in row
    page = (await dashboard.get(f"/queues/{queue_name}/job?id=single")).text
    assert "Next run (blocked)" in page and "next" in _page(page, "Next run (blocked)")
    rows = json.loads(_cli("jobs", "list", queue_name, "blocked", "--json", url=redis_url).output)
    assert [(r["id"], r["state"], r["data"]) for r in rows] == [
        ("single", "blocked", {"n": "next"})
    ]
    shown = json.loads(_cli("jobs", "show", queue_name, "single", "--json", url=redis_url).output)
    assert shown["state"] == "active" and shown["blocked_twin"]["data"] == {"n": "next"}


async def test_retrying_a_parent_failed_by_a_child_says_what_it_does(
    dashboard: httpx.AsyncClient, queue_name: str, sync_queue: Queue, redis_client: redis.Redis
) -> None:
    kid = FlowJob(task="t", options={"id": "kid", "max_failures": 1})
    sync_queue.enqueue_flow(FlowJob(task="t", options={"id": "parent"}, children=[kid]))
    assert _claim(sync_queue, redis_client, lease_ms=60_000, worker="w") == ["kid"]
    items = [ops.FailItem("kid", "t", "ValueError: no", True, None, 0.0)]
    _runner(sync_queue, redis_client).run(ops.fail(sync_queue.core.keys, items, events_maxlen=100))
    parent = sync_queue.get("parent")
    assert parent is not None and parent.state is JobState.FAILED
    page = (await dashboard.get(f"/queues/{queue_name}/job?id=parent")).text
    assert "failed because a child failed" in page
    assert "without its failed child’s result" in page  # the Retry button's confirmation
    queue_page = (await dashboard.get(f"/queues/{queue_name}")).text
    assert "without that child’s result" in queue_page

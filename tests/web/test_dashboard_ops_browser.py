"""The operators' views, clicked in chromium against the session's Redis and
real workers: latency, throughput and the stuck warning, chart ranges, failed
lists filtered and acted on in bulk, the Busy page with quiet and stop, the
audit trail (who: the basic-auth user), failure lanes and the trace id.
Screenshots go to tests/results/."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from conveyor import JobState, Queue
from conveyor.client.tasks import Tasks
from conveyor.integrations.web import DashboardSettings, ops
from conveyor.worker import current_job
from support.workers import WorkerRunner, wait_until

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _tasks(redis_url: str, queue_name: str) -> Tasks:
    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task
    async def send(data: dict[str, str]) -> dict[str, str]:
        return {"sent": data["to"]}

    @tasks.task(max_failures=1)
    async def charge(data: dict[str, int]) -> None:
        raise ValueError(f"card declined for {data['n']}")

    @tasks.task(max_failures=1)
    async def refund(data: dict[str, int]) -> None:
        raise TimeoutError(f"gateway timeout for {data['n']}")

    @tasks.task
    async def slow(data: None) -> None:
        current_job().progress(0.5)
        await asyncio.sleep(60)  # until its worker stops

    return tasks


@pytest.fixture
def ann(browser: Any) -> Iterator[Any]:
    """A page of a browser logged in (basic auth) as ann."""
    context = browser.new_context(
        viewport={"width": 1280, "height": 900},
        http_credentials={"username": "ann", "password": "secret"},
    )
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    opened.on("dialog", lambda dialog: dialog.accept())
    yield opened
    context.close()


def _act(page: Any, action: str, message: str) -> None:
    page.locator(f"button[data-action={action}]").first.click()
    expect(page.locator(".flash")).to_contain_text(message)


def test_the_operators_views(
    serve: Any, ann: Any, shot: Any, redis_url: str, queue_name: str, sync_queue: Queue,
    worker_runner: WorkerRunner, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    page = ann
    monkeypatch.setattr(ops, "STUCK_AFTER", 1.0)  # not a minute: the test would wait for it
    served = serve(DashboardSettings(url=redis_url, queues=(queue_name,), page_size=5,
                                     basic="ann:secret"))  # fmt: skip
    base = served.url + f"/queues/{queue_name}"
    tasks = _tasks(redis_url, queue_name)

    # Busy: a live worker with its memory and CPU; quiet it from the page
    first = worker_runner.start(tasks, heartbeat_interval=0.3)
    wait_until(sync_queue.workers, timeout=30)
    page.goto(base + "/workers")
    worker_row = page.locator("#workers tbody tr").first
    expect(worker_row.locator("td.rss")).to_have_text(re.compile(r"^\d+ MiB$"))
    expect(worker_row.locator("td.cpu")).to_have_text(re.compile(r"^\d+ %$"))
    _act(page, "quiet_worker", "claims no more jobs")
    wait_until(lambda: sync_queue.workers()[0].info.get("quiet") is True, timeout=30)

    # a quiet worker and a backlog: latency grows, nothing is done, the queue is flagged
    for n in range(6):
        sync_queue.enqueue("send", {"to": f"u{n}"}, id=f"send-{n}")
    for n in range(3):
        sync_queue.enqueue("charge", {"n": n}, id=f"charge-{n}")
    for n in range(2):
        sync_queue.enqueue("refund", {"n": n}, id=f"refund-{n}")
    wait_until(lambda: (sync_queue.latency() or 0) > 1.2, timeout=30)
    page.goto(served.url + "/")
    row = page.locator("tr", has=page.get_by_role("link", name=queue_name, exact=True))
    expect(row.locator(".stuck")).to_be_visible()
    expect(row.locator("td.latency")).to_have_text(re.compile(r"^\d.* (ms|s)$"))
    shot(page, "11-overview-stuck")
    page.goto(base)
    expect(page.locator("p.warn.stuck")).to_be_visible()
    expect(page.locator(".card.latency b")).not_to_have_text("—")
    page.goto(base + "/workers")
    expect(page.locator("#workers .badge", has_text="quiet")).to_be_visible()
    shot(page, "12-busy-quiet")
    _act(page, "stop_worker", "asked")
    first.thread.join(30)
    assert not first.thread.is_alive()
    assert sync_queue.counts()[JobState.WAITING] == 11  # the quiet worker claimed nothing

    # a new worker drains the backlog
    second = worker_runner.start(tasks, heartbeat_interval=0.3, concurrency=4, grace=0.1)
    wait_until(lambda: sync_queue.counts()[JobState.COMPLETED] == 6, timeout=30)
    wait_until(lambda: sync_queue.counts()[JobState.FAILED] == 5, timeout=30)
    wait_until(lambda: sum(m.failed for m in sync_queue.metrics_history()) == 5, timeout=30)
    page.goto(served.url + "/")
    expect(row.locator(".stuck")).to_have_count(0)
    expect(row.locator("td.latency")).to_have_text("—")
    expect(row.locator("td.throughput")).to_have_text(re.compile(r"^\d+\.\d$"))

    # chart ranges: a day and a week of the stored history
    page.goto(base)
    expect(page.locator("h2.range-title")).to_contain_text("Last hour: 6 completed, 5 failed")
    page.locator("nav.ranges").get_by_role("link", name="24h").click()
    expect(page.locator("h2.range-title")).to_contain_text("Last 24 hours: 6 completed, 5 failed")
    expect(page.locator("#throughput canvas").first).to_be_visible()
    page.locator("nav.ranges").get_by_role("link", name="7d").click()
    expect(page.locator("h2.range-title")).to_contain_text("Last 7 days: 6 completed, 5 failed")
    expect(page.locator("#throughput canvas").first).to_be_visible()
    shot(page, "13-queue-7-days")

    # failed jobs: the error and arguments columns, filters, retry and delete selected
    page.goto(base + "/jobs/failed")
    expect(page.locator("table.jobs tbody tr", has_text="charge-1")).to_contain_text(
        "ValueError: card declined for 1")
    expect(page.locator("table.jobs tbody tr", has_text="charge-1")).to_contain_text('{"n": 1}')
    page.locator("form.filter input[name=error]").fill("declined")
    page.locator("form.filter button").click()
    expect(page.locator("h1")).to_contain_text("3 failed job(s)")
    expect(page.locator("table.jobs tbody tr")).to_have_count(3)
    expect(page.locator(".filter-scope")).to_contain_text("3 match(es) among the 5 newest")
    shot(page, "14-failed-filtered")
    page.locator("input[aria-label='select charge-0']").check()
    page.locator("input[aria-label='select charge-2']").check()
    _act(page, "retry_selected", "retried 2 of 2 selected job(s)")
    wait_until(lambda: sync_queue.get("charge-2").attempts == 2, timeout=30)
    wait_until(lambda: sync_queue.counts()[JobState.FAILED] == 5, timeout=30)
    page.goto(base + "/jobs/failed?task=refund")
    expect(page.locator("table.jobs tbody tr")).to_have_count(2)
    page.locator("th input[type=checkbox]").check()  # the whole page
    _act(page, "remove_selected", "removed 2 of 2 selected job(s)")
    assert sync_queue.counts()[JobState.FAILED] == 3

    # completed: a jump to the last page and back, then purge the state
    page.goto(base + "/jobs/completed")
    page.get_by_role("link", name="last »").first.click()
    expect(page.locator(".pager").first).to_contain_text("page 2 of 2")
    expect(page.locator("table.jobs tbody tr")).to_have_count(1)
    page.get_by_role("link", name="« first").first.click()
    expect(page.locator(".pager").first).to_contain_text("page 1 of 2")
    _act(page, "purge", "removed 6 completed job(s)")
    assert sync_queue.counts()[JobState.COMPLETED] == 0

    # delayed: run them all now
    for n in range(2):
        sync_queue.enqueue("send", {"to": "later"}, id=f"later-{n}", delay=3600)
    page.goto(base + "/jobs/delayed")
    _act(page, "promote_all", "promoted 2 delayed job(s)")
    wait_until(lambda: sync_queue.counts()[JobState.COMPLETED] == 2, timeout=30)

    # Busy: a running job with its start, run time and progress
    sync_queue.enqueue("slow", None, id="slow-1", headers={"traceparent": TRACEPARENT})
    wait_until(lambda: (sync_queue.get("slow-1").progress or 0) == 0.5, timeout=30)
    page.goto(base + "/workers")
    running = page.locator("#running tbody tr", has_text="slow-1")
    expect(running).to_contain_text("slow")
    expect(running).to_contain_text("50 %")
    expect(running).to_contain_text(re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"))
    shot(page, "15-busy-running")

    # the job page shows the trace id its enqueue carried
    running.get_by_role("link", name="slow-1").click()
    expect(page.locator("td.trace-id")).to_have_text("4bf92f3577b34da6a3ce929d0e0e4736")
    second.stop_now()

    # the audit trail: every action above, by ann, from the dashboard
    page.goto(base)
    page.get_by_role("link", name="audit", exact=True).click()
    rows = page.locator("table.audit tbody tr")
    expect(rows).to_have_count(6)
    expect(rows.first).to_contain_text("promoted 2 delayed job(s)")
    actions = [rows.nth(i).locator("td").nth(3).inner_text() for i in range(6)]
    assert actions == ["promote_all", "purge", "remove_selected", "retry_selected",
                       "stop_worker", "quiet_worker"]  # fmt: skip
    for i in range(6):
        expect(rows.nth(i).locator("td").nth(1)).to_have_text("ann")
        expect(rows.nth(i).locator("td").nth(2)).to_have_text("dashboard")
    expect(rows.nth(2).locator("td").nth(4)).to_have_text("refund-1 refund-0")  # newest first
    shot(page, "16-audit")

    # the failure lane: listed on the overview, its pages open
    lane_job = sync_queue.failure_lane().enqueue("t", {"of": "charge-0"})
    page.goto(served.url + "/")
    page.get_by_role("link", name=f"{queue_name}:failures", exact=True).click()
    expect(page.locator("h1")).to_contain_text(f"Queue {queue_name}:failures")
    page.locator("header nav a.state-waiting").click()
    expect(page.locator("table.jobs tbody tr", has_text=lane_job.id)).to_have_count(1)
    shot(page, "17-failure-lane")
    worker_runner.start(tasks, failures=True, heartbeat_interval=0.3)  # the lane's worker
    wait_until(sync_queue.failure_lane().workers, timeout=30)
    page.get_by_role("link", name="workers", exact=True).click()
    expect(page.locator("#workers tbody tr").first).to_contain_text("failure lane")

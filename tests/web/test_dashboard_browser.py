"""Every page and action of the dashboard, clicked through in chromium against
the session's Redis and a real worker; screenshots go to tests/results/."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from playwright.sync_api import expect

from conveyor import JobState, Queue
from conveyor.client.tasks import Tasks
from conveyor.integrations.web import DashboardSettings
from support.workers import WorkerRunner, wait_until


def _tasks(redis_url: str, queue_name: str) -> Tasks:
    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task
    async def send(data: dict[str, str]) -> dict[str, str]:
        return {"sent": data["to"]}

    @tasks.task(max_failures=1)
    async def charge(data: dict[str, int]) -> None:
        raise ValueError(f"card declined for {data['n']}")

    @tasks.task
    async def hang(data: None) -> None:
        await asyncio.sleep(60)  # until aborted

    return tasks


def _finished(queue: Queue) -> tuple[int, int]:
    """Completed and failed jobs of the last hour in the metrics history."""
    minutes = queue.metrics_history()
    return sum(m.completed for m in minutes), sum(m.failed for m in minutes)


def _act(page: Any, action: str, message: str) -> None:
    """Click an action's button (the confirm dialog is accepted) and see its outcome."""
    page.locator(f"button[data-action={action}]").first.click()
    expect(page.locator(".flash")).to_contain_text(message)


def test_every_page_and_action(
    serve: Any, page: Any, shot: Any, redis_url: str, queue_name: str,
    sync_queue: Queue, worker_runner: WorkerRunner,
) -> None:  # fmt: skip
    for n in range(12):
        customer = "acme" if n % 2 else "zeta"
        sync_queue.enqueue("send", {"to": f"u{n}"}, id=f"send-{n}", index={"customer": customer})
    for n in (1, 2):
        sync_queue.enqueue("charge", {"n": n}, id=f"charge-{n}", max_failures=1)
    served = serve(DashboardSettings(url=redis_url, queues=(queue_name,), page_size=5))

    # queues: work waiting and no worker is flagged
    page.goto(served.url + "/")
    row = page.locator("tr", has=page.get_by_role("link", name=queue_name, exact=True))
    expect(row).to_contain_text("work waiting, no live worker")
    shot(page, "01-queues-no-worker")

    running = worker_runner.start(_tasks(redis_url, queue_name), heartbeat_interval=0.3)
    wait_until(lambda: sync_queue.counts()[JobState.COMPLETED] == 12, timeout=30)
    wait_until(lambda: sync_queue.counts()[JobState.FAILED] == 2, timeout=30)
    wait_until(lambda: _finished(sync_queue) == (12, 2), timeout=30)

    # one queue: counts, the throughput chart, no warning with a live worker
    page.get_by_role("link", name=queue_name, exact=True).first.click()
    expect(page.locator(".card.state-completed b")).to_have_text("12")
    expect(page.locator(".card.state-failed b")).to_have_text("2")
    expect(page.locator("h2", has_text="Last hour:")).to_contain_text("12 completed, 2 failed")
    expect(page.locator("#throughput canvas").first).to_be_visible()
    expect(page.locator("p.warn")).to_have_count(0)
    shot(page, "02-queue")

    # workers: the roll call
    page.get_by_role("link", name="workers", exact=True).click()
    expect(page.locator("#workers tbody tr")).to_have_count(1)
    expect(page.locator("#workers tbody")).to_contain_text("charge, hang, send")
    last_beat = page.locator("#workers tbody td.beat")
    expect(last_beat).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$"))
    shot(page, "03-workers")

    # jobs by state, paged from the index
    page.locator("header nav a.state-completed").click()
    expect(page.locator("h1")).to_contain_text("12 completed job(s)")
    expect(page.locator("table.jobs tbody tr")).to_have_count(5)
    page.get_by_role("link", name="next →").first.click()
    expect(page.locator(".pager").first).to_contain_text("page 2 of 3")
    expect(page.locator("table.jobs tbody tr")).to_have_count(5)
    shot(page, "04-completed-page-2")

    # a failed job: error, events; retry it, then retry every failed job
    page.locator("header nav a.state-failed").click()
    page.get_by_role("link", name="charge-1").click()
    expect(page.locator("pre.error").first).to_contain_text("card declined for 1")
    expect(page.locator("table.runs td.state-failed")).to_have_count(1)  # its one run
    expect(page.locator("table").last).to_contain_text("created")
    shot(page, "05-failed-job")
    _act(page, "retry", "retried charge-1")
    wait_until(lambda: sync_queue.get("charge-1").attempts == 2, timeout=30)
    wait_until(lambda: sync_queue.counts()[JobState.FAILED] == 2, timeout=30)
    page.get_by_role("link", name=queue_name, exact=True).first.click()
    _act(page, "retry_failed", "retried 2 failed job(s)")
    wait_until(lambda: sync_queue.counts()[JobState.FAILED] == 2, timeout=30)

    # abort a running job: its worker stops it, and it fails for good
    sync_queue.enqueue("hang", None, id="hang-1")
    wait_until(lambda: sync_queue.get("hang-1").state is JobState.ACTIVE, timeout=30)
    page.goto(served.url + f"/queues/{queue_name}/job?id=hang-1")
    _act(page, "abort", "aborting hang-1: its worker stops it")
    wait_until(lambda: sync_queue.get("hang-1").state is JobState.FAILED, timeout=30)
    assert (sync_queue.get("hang-1").error or "").startswith("AbortedError")
    running.stop()
    page.goto(served.url + f"/queues/{queue_name}")

    # pause the queue, then steer waiting and delayed jobs
    page.reload()
    _act(page, "pause", f"paused {queue_name}")
    expect(page.locator("h1 .badge:not(.protocol-version)")).to_have_text("paused")
    sync_queue.enqueue("send", {"to": "w"}, id="waiting-1")
    sync_queue.enqueue("send", {"to": "w"}, id="waiting-2")
    sync_queue.enqueue("send", {"to": "d"}, id="delayed-1", delay=3600)
    sync_queue.enqueue("send", {"to": "g"}, id="grouped-1", group="acme")

    page.goto(served.url + f"/queues/{queue_name}/job?id=waiting-1")
    page.locator("select[name=priority]").select_option("high")
    _act(page, "priority", "waiting-1: priority high")
    assert sync_queue.get("waiting-1").priority == 0
    _act(page, "cancel", "cancelled waiting-1")
    assert sync_queue.get("waiting-1") is None
    page.goto(served.url + f"/queues/{queue_name}/job?id=waiting-2")
    _act(page, "remove", "removed waiting-2")
    assert sync_queue.get("waiting-2") is None
    page.goto(served.url + f"/queues/{queue_name}/job?id=delayed-1")
    expect(page.locator("h1 .badge:not(.protocol-version)")).to_have_text("delayed")
    _act(page, "promote", "promoted delayed-1")
    assert sync_queue.get("delayed-1").state is JobState.WAITING
    shot(page, "06-job-actions")

    # groups: pause and resume one; then resume the queue
    page.get_by_role("link", name=queue_name, exact=True).first.click()
    _act(page, "pause_group", "paused group acme")
    expect(page.locator("tr", has_text="acme")).to_contain_text("paused")
    _act(page, "resume_group", "resumed group acme")
    assert not sync_queue.overview().groups[0].paused
    _act(page, "resume", f"resumed {queue_name}")
    expect(page.locator("h1 .badge:not(.protocol-version)")).to_have_text("running")
    shot(page, "07-queue-resumed")

    # search: by id, then by indexed property
    page.locator("header form.search input[name=id]").fill("send-3")
    page.locator("header form.search button").click()
    expect(page.locator("h1")).to_contain_text("send-3")
    expect(page.locator("pre.data").first).to_contain_text('"to": "u3"')
    page.goto(served.url + f"/queues/{queue_name}")
    page.locator("input[name=field]").fill("customer")
    page.locator("input[name=value]").fill("acme")
    page.get_by_role("button", name="search").click()
    expect(page.locator("table.jobs tbody tr")).to_have_count(5)  # a page of the six
    shot(page, "08-search")

    # schedules: add, edit, remove
    page.get_by_role("link", name="schedules", exact=True).click()
    page.locator("input[name=schedule]:not([type=hidden])").fill("nightly")
    page.locator("input[name=task]").fill("send")
    page.locator("input[name=data]").fill('{"to": "ops"}')
    page.locator("input[name=cron]").fill("0 3 * * *")
    _act(page, "schedule", "scheduled nightly")
    row = page.locator("tbody tr", has_text="nightly")
    expect(row).to_contain_text("0 3 * * *")
    expect(row).to_contain_text(re.compile(r"\d{4}-\d\d-\d\d 03:00:00 UTC"))
    row.get_by_role("link", name="edit").click()
    expect(page.locator("input[name=schedule]:not([type=hidden])")).to_have_value("nightly")
    page.locator("input[name=cron]").fill("30 4 * * *")
    _act(page, "schedule", "scheduled nightly")
    expect(page.locator("tbody tr", has_text="nightly")).to_contain_text("30 4 * * *")
    shot(page, "09-schedules")
    _act(page, "unschedule", "removed schedule nightly")
    expect(page.locator("tbody")).to_contain_text("no schedules")
    assert sync_queue.schedules() == []


def test_read_only_shows_no_actions_and_refuses_them(
    serve: Any, page: Any, shot: Any, redis_url: str, queue_name: str, sync_queue: Queue
) -> None:
    sync_queue.enqueue("send", {"to": "a"}, id="ro-1", delay=3600)
    served = serve(DashboardSettings(url=redis_url, queues=(queue_name,), read_only=True))
    for path in (f"/queues/{queue_name}", f"/queues/{queue_name}/job?id=ro-1",
                 f"/queues/{queue_name}/schedules"):  # fmt: skip
        page.goto(served.url + path)
        expect(page.locator(".badge", has_text="read-only")).to_be_visible()
        expect(page.locator("form.action")).to_have_count(0)
    shot(page, "10-read-only")
    answer = page.request.post(
        served.url + f"/queues/{queue_name}/do/promote", form={"id": "ro-1", "csrf": "x"}
    )
    assert answer.status == 403
    assert sync_queue.get("ro-1").state is JobState.DELAYED

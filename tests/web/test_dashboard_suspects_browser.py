"""Suspects (jobs whose last worker died with them) in chromium against a real worker:
the badge on the job page, the running suspect on the workers and queue pages, and the
operator's Release and Fail buttons. Screenshots go to tests/results/."""

from __future__ import annotations

import os
from typing import Any

from playwright.sync_api import expect

from conveyor import JobState, Queue
from conveyor.client.tasks import Tasks
from conveyor.integrations.web import DashboardSettings
from support import process_app
from support.workers import WorkerRunner, wait_until


def _suspect(queue: Queue, job_id: str, seconds: float) -> None:
    queue.enqueue("nap", seconds, id=job_id)
    queue.client.hset(queue.core.keys.job(job_id), "stalls", 1)  # as a reap leaves it


def _act(page: Any, action: str, message: str) -> None:
    page.locator(f"button[data-action={action}]").first.click()
    expect(page.locator(".flash")).to_contain_text(message)


def test_suspects_shown_released_and_failed_from_the_dashboard(
    serve: Any, page: Any, shot: Any, redis_url: str, queue_name: str, sync_queue: Queue,
    worker_runner: WorkerRunner,
) -> None:  # fmt: skip
    tasks = Tasks(queue_name, url=redis_url)
    tasks.handlers.update(process_app.tasks.handlers)
    # in ready order: a worker of one suspect at a time runs the first and steps over the others
    _suspect(sync_queue, "runs-isolated", 120.0)
    _suspect(sync_queue, "to-release", 0.01)
    _suspect(sync_queue, "to-fail", 0.01)
    worker = worker_runner.start(tasks, concurrency=4, lease=1.5, suspects=1)  # roll call: 0.5 s
    wait_until(lambda: [w for w in sync_queue.workers() if w.info.get("suspects")], timeout=30)
    served = serve(DashboardSettings(url=redis_url, queues=(queue_name,)))
    base = served.url + f"/queues/{queue_name}"

    # the running suspect: on the workers page (with its worker) and on the queue page
    page.goto(base + "/workers")
    row = page.locator("#workers tbody tr", has=page.locator("a.badge.suspect"))
    expect(row.locator("a.badge.suspect")).to_have_text("runs-isolated")
    expect(row).to_contain_text(worker.worker.id)
    shot(page, "30-suspect-workers")
    page.goto(base)
    expect(page.locator("#suspects")).to_contain_text("runs-isolated")
    expect(page.locator("#suspects")).to_contain_text(worker.worker.id)
    shot(page, "31-suspect-queue")

    # a waiting suspect: its badge, then Release: it runs as any job, on the worker's loop
    page.goto(base + "/job?id=to-release")
    expect(page.locator("h1 .badge.suspect")).to_be_visible()
    expect(page.locator("h1 .badge.state-waiting")).to_be_visible()
    shot(page, "32-suspect-waiting")
    _act(page, "release_suspect", "released to-release: it runs as any other job")
    # at once: the release wakes the worker, blocked after it stepped over the suspect (its
    # idle wait is 30 s here)
    result = sync_queue.wait_result("to-release", timeout=10)
    assert result["pid"] == os.getpid()  # not isolated in a child: released
    page.reload()
    expect(page.locator("h1 .badge.state-completed")).to_be_visible()
    expect(page.locator("h1 .badge.suspect")).to_have_count(0)

    # another waiting suspect: Fail ends it unrun
    page.goto(base + "/job?id=to-fail")
    expect(page.locator("h1 .badge.suspect")).to_be_visible()
    _act(page, "fail_suspect", "failed to-fail")
    failed = sync_queue.get("to-fail")
    assert failed.state is JobState.FAILED
    assert "failed by an operator, unrun" in (failed.error or "")
    page.reload()
    expect(page.locator("h1 .badge.state-failed")).to_be_visible()

    # the running suspect: Fail aborts it, its worker stops the child and the page clears
    page.goto(base + "/job?id=runs-isolated")
    expect(page.locator("h1 .badge.state-active")).to_be_visible()
    expect(page.locator("h1 .badge.suspect")).to_be_visible()
    shot(page, "33-suspect-running")
    _act(page, "fail_suspect", "aborting runs-isolated: its worker stops it")
    wait_until(lambda: sync_queue.get("runs-isolated").state is JobState.FAILED, timeout=30)
    wait_until(lambda: not any(w.info.get("suspects") for w in sync_queue.workers()), timeout=30)
    page.goto(base)
    expect(page.locator("#suspects")).to_have_count(0)
    assert sync_queue.get("runs-isolated").state is JobState.FAILED

"""Small things an operator trips on: a refused action looks refused and keeps
its form, an unknown task is not scheduled, no message comes from the address,
links do not come from the Host header, a favicon, the chart fits a phone's width."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from conveyor import Queue
from conveyor.client.tasks import Tasks
from conveyor.integrations.web import DashboardSettings, dashboard_app
from support.workers import WorkerRunner


@pytest.fixture
async def client(redis_url: str, queue_name: str) -> AsyncIterator[httpx.AsyncClient]:
    app = dashboard_app(DashboardSettings(url=redis_url, queues=(queue_name,)))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://dash.test") as opened:
        yield opened
    await app.state.queues.close()


async def _csrf(client: httpx.AsyncClient, path: str) -> str:
    page = await client.get(path)
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None
    return found.group(1)


async def test_no_message_comes_from_the_address_and_links_are_paths(
    client: httpx.AsyncClient, queue_name: str, sync_queue: Queue
) -> None:
    sync_queue.enqueue("t", None, id="j1")
    page = await client.get(
        f"/queues/{queue_name}?done=Your+account+is+locked", headers={"host": "evil.example"}
    )
    assert "Your account is locked" not in page.text
    assert "evil.example" not in page.text
    assert f'href="/queues/{queue_name}/workers"' in page.text
    icon = await client.get("/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")


async def test_a_refused_action_is_shown_as_refused_and_keeps_its_form(
    client: httpx.AsyncClient, queue_name: str, redis_url: str, worker_runner: WorkerRunner,
    sync_queue: Queue,
) -> None:  # fmt: skip
    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task
    def report(data: None) -> None:
        pass

    worker_runner.start(tasks)
    path = f"/queues/{queue_name}/schedules"
    token = await _csrf(client, path)
    form = {"csrf": token, "back": path, "schedule": "nightly", "task": "reprot",
            "data": '{"x": 1}', "cron": "30 4 * * *"}  # fmt: skip
    for _ in range(100):  # the worker's first heartbeat names its tasks
        if sync_queue.workers():
            break
        await _sleep(0.05)
    answer = await client.post(f"/queues/{queue_name}/do/schedule", data=form)
    assert answer.status_code == 303 and "?" not in answer.headers["location"]
    page = (await client.get(path)).text
    assert 'class="flash flash-refused"' in page
    flash = page.split('class="flash flash-refused"', 1)[1].split("</p>", 1)[0]
    assert "no worker of" in flash and "reprot" in flash and "(report)" in flash
    assert 'value="reprot"' in page and 'value="30 4 * * *"' in page  # the form as sent
    assert sync_queue.schedules() == []
    again = (await client.get(path)).text  # shown once
    assert "flash" not in again.split("<main>")[1].split("</h1>")[0]
    form["task"] = "report"
    await client.post(f"/queues/{queue_name}/do/schedule", data=form)
    page = (await client.get(path)).text
    assert 'class="flash"' in page and "scheduled nightly" in page
    assert [s.task for s in sync_queue.schedules()] == ["report"]


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


def test_the_queue_page_fits_a_phone(
    serve: Any, browser: Any, shot: Any, redis_url: str, queue_name: str, sync_queue: Queue
) -> None:
    sync_queue.enqueue("t", None)
    served = serve(DashboardSettings(url=redis_url, queues=(queue_name,)))
    context = browser.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    try:
        page.goto(served.url + f"/queues/{queue_name}")
        expect(page.locator("#throughput canvas")).to_have_count(1)
        chart = page.locator("#throughput").bounding_box()
        assert chart is not None and chart["x"] + chart["width"] <= 390
        canvas = page.locator("#throughput canvas").first.bounding_box()
        assert canvas is not None and canvas["x"] + canvas["width"] <= 390
        shot(page, "21-queue-on-a-phone")
    finally:
        context.close()

"""The dashboard shows a queue's protocol version (docs/protocol.md §10) on the
queue page and the queues list, in a real browser: a version 3 queue, then the
same queue after `migrate`."""

from __future__ import annotations

from typing import Any

import redis
from playwright.sync_api import expect

from conveyor import Queue
from conveyor.integrations.web import DashboardSettings
from support.protocol3 import Version3


def test_the_queue_page_and_the_list_show_the_protocol_version(
    serve: Any, browser: Any, redis_url: str, redis_client: redis.Redis, queue_name: str
) -> None:
    Version3(redis_client, queue_name).enqueue("w1", "work")
    served = serve(DashboardSettings(url=redis_url, queues=(queue_name,)))
    page = browser.new_page()
    try:
        page.goto(served.url + f"/queues/{queue_name}")
        expect(page.locator("h1 .protocol-version")).to_have_text("protocol 3")
        with Queue(queue_name, url=redis_url) as queue:
            queue.migrate()
        page.goto(served.url + f"/queues/{queue_name}")
        expect(page.locator("h1 .protocol-version")).to_have_text("protocol 4")
        page.goto(served.url + "/")
        row = page.locator("tr", has=page.locator(f"a:text-is('{queue_name}')"))
        expect(row.locator(".protocol-version")).to_have_text("4")
    finally:
        page.close()

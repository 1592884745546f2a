"""Signing in to the dashboard in chromium through a real uvicorn: the token in
the address once, then the cookie for every path (pages, /metrics, static files)."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from conveyor import Queue
from conveyor.integrations.web import DashboardSettings


def test_token_login_in_the_address_then_the_cookie(
    serve: Any, page: Any, shot: Any, redis_url: str, queue_name: str, sync_queue: Queue
) -> None:
    sync_queue.enqueue("send", {"to": "a"}, id="tok-1")
    served = serve(DashboardSettings(url=redis_url, queues=(queue_name,), token="s3cret"))
    refused = page.goto(served.url + "/")
    assert refused is not None and refused.status == 401
    for path in ("/", f"/queues/{queue_name}", "/metrics", "/static/style.css"):
        answer = page.goto(served.url + path + "?token=s3cret")
        assert answer is not None and answer.status == 200, path
        assert answer.body(), path
    page.goto(served.url + f"/queues/{queue_name}/job?id=tok-1")  # the cookie alone
    expect(page.locator("main")).to_contain_text("tok-1")
    shot(page, "20-token-login")

"""The dashboard when Redis does not answer: a page that says so, naming no
password, and /metrics answering `conveyor_up 0` with a 503."""

from __future__ import annotations

import socket

import httpx

from conveyor.integrations.web import DashboardSettings, dashboard_app


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_pages_and_metrics_say_redis_is_unreachable() -> None:
    url = f"redis://:hunter2-secret@127.0.0.1:{_closed_port()}/0"
    for queues in ((), ("orders",)):  # the registry read, or a named queue's
        app = dashboard_app(DashboardSettings(url=url, queues=queues))
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://dash.test") as client:
            for path in ("/", "/queues/orders", "/queues/orders/jobs/failed"):
                page = await client.get(path)
                assert page.status_code == 503, (path, page.status_code)
                assert "Redis is unreachable" in page.text
                assert "hunter2" not in page.text and "127.0.0.1" not in page.text
            metrics = await client.get("/metrics")
            assert metrics.status_code == 503
            assert "conveyor_up 0" in metrics.text.splitlines()
        await app.state.queues.close()

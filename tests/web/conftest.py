"""The dashboard served by a real uvicorn on a free port, mounted under a prefix
inside a parent Starlette app, and Debian's chromium driven by Playwright."""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from conveyor.integrations.web import DashboardSettings, dashboard_app

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]  # fmt: skip
RESULTS = Path(__file__).resolve().parents[1] / "results"
PREFIX = "/ops/conveyor"


class Served:
    """A uvicorn server on a thread; `url` is the dashboard's root."""

    def __init__(self, settings: DashboardSettings) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        dashboard = dashboard_app(settings)
        parent = Starlette(
            routes=[
                Route("/", lambda request: PlainTextResponse("the host app")),
                Mount(PREFIX, dashboard),
            ],
            # a mounted app's lifespan is not run by its host: run it, to close its connections
            lifespan=lambda app: dashboard.router.lifespan_context(dashboard),
        )
        config = uvicorn.Config(parent, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the dashboard's uvicorn did not start")
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.port}{PREFIX}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)


@pytest.fixture
def serve() -> Iterator[Any]:
    started: list[Served] = []

    def start(settings: DashboardSettings) -> Served:
        started.append(Served(settings))
        return started[-1]

    yield start
    for served in started:
        served.stop()


@pytest.fixture(scope="module")  # not kept open while other modules' event loops run
def browser() -> Iterator[Any]:
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} not found: run `make tools` (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    opened.on("dialog", lambda dialog: dialog.accept())  # every action's confirmation
    yield opened
    context.close()


@pytest.fixture
def shot() -> Any:
    """Take a screenshot kept under tests/results/ (a CI artifact)."""

    def take(page: Any, name: str) -> None:
        RESULTS.mkdir(exist_ok=True)
        page.screenshot(path=str(RESULTS / f"{name}.png"), full_page=True)

    return take

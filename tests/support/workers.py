"""Workers on background threads (each with its own event loop) for tests,
and worker processes for the tests that kill them."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from conveyor.client.tasks import Tasks
from conveyor.worker import Worker, WorkerSettings

SRC = Path(__file__).resolve().parents[2] / "src"
APPS = Path(__file__).resolve().parent


class RunningWorker:
    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._main, daemon=True)
        self.thread.start()

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self.worker.run()

    def stop(self, timeout: float = 15.0) -> None:
        """Like SIGTERM (twice with `hard`): graceful stop, then join."""
        if self._loop is not None and self.thread.is_alive():
            self._loop.call_soon_threadsafe(self.worker.stop)
        self.thread.join(2)
        if self.thread.is_alive() and self._loop is not None:

            def dump():
                for t in asyncio.all_tasks(self._loop):
                    t.print_stack()

            self._loop.call_soon_threadsafe(dump)
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError("worker did not stop in time")
        if self.error is not None:
            raise self.error

    def stop_now(self) -> None:
        if self._loop is not None and self.thread.is_alive():
            self._loop.call_soon_threadsafe(self.worker.stop)
            self._loop.call_soon_threadsafe(self.worker.stop)


class WorkerRunner:
    def __init__(self, url: str) -> None:
        self.url = url
        self.running: list[RunningWorker] = []

    def start(self, tasks: Tasks | Sequence[Tasks], **settings: Any) -> RunningWorker:
        settings.setdefault("idle_wait", 30.0)  # long: a test that passes can't be polling
        worker = Worker(tasks, url=self.url, settings=WorkerSettings(**settings))
        handle = RunningWorker(worker)
        self.running.append(handle)
        return handle

    def stop_all(self) -> None:
        for handle in self.running:
            if handle.thread.is_alive():
                handle.stop()


def wait_until(check: Callable[[], Any], timeout: float = 10.0, interval: float = 0.01) -> Any:
    """Poll a condition in a test (never in the product) until truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


def spawn_worker(
    target: str, url: str, *extra: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """A real worker process in its own session (so signals hit only it)."""
    command = [sys.executable, "-m", "conveyor.integrations.cli", "worker", target, "--url", url]
    environment = {**os.environ, "PYTHONPATH": f"{APPS}{os.pathsep}{SRC}", **(env or {})}
    return subprocess.Popen(
        [*command, *extra],
        env=environment,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )

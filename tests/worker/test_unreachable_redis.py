"""A worker whose Redis cannot be reached at start: it keeps trying and says
so at WARNING with the address (password hidden); with --wait-for-redis it
gives up after that long, exit code 2 and a one-line error."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import time

import pytest

from conveyor.client.tasks import Tasks
from support.workers import APPS, SRC, WorkerRunner, wait_until


def _dead_url() -> str:
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"redis://:hunter2@127.0.0.1:{port}/0"


def test_a_worker_that_cannot_reach_redis_says_so_with_the_address(
    queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="conveyor.worker")
    url = _dead_url()
    runner = WorkerRunner(url)
    handle = runner.start(Tasks(queue_name, url=url))

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]

    wait_until(said, timeout=10)
    time.sleep(1.0)  # several attempts: still one line (the next in 30 s)
    lines = said()
    shown = url.replace(":hunter2@", ":***@")
    assert len(lines) == 1 and shown in lines[0], lines
    assert "keeps trying until it answers" in lines[0] and "hunter2" not in lines[0]
    assert handle.thread.is_alive()  # still trying
    handle.stop_now()
    handle.thread.join(15)
    assert not handle.thread.is_alive()


def test_wait_for_redis_fails_fast_with_exit_code_2_and_one_line(queue_name: str) -> None:
    url = _dead_url()
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "conveyor.integrations.cli", "worker", "observe_app:tasks",
         "--url", url, "--wait-for-redis", "1"],
        env={"PYTHONPATH": f"{APPS}:{SRC}", "TEST_QUEUE": queue_name, "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert time.monotonic() - began < 30  # 1 s of trying, plus the interpreter's start
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    port = url.rsplit(":", 1)[1].split("/")[0]
    assert len(errors) == 1 and f"127.0.0.1:{port}" in errors[0] and "within 1 s" in errors[0]
    assert "hunter2" not in done.stderr + done.stdout
    assert "Traceback" not in done.stderr


def test_wait_for_redis_must_be_positive() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "conveyor.integrations.cli", "worker", "observe_app:tasks",
         "--url", "redis://127.0.0.1:1/0", "--wait-for-redis", "0"],
        env={"PYTHONPATH": f"{APPS}:{SRC}", "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "--wait-for-redis" in done.stderr

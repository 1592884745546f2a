"""The documentation site builds with warnings as errors (`make docs`), and the deployment
page's liveness probe does what it says against a live worker."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

from conveyor import Tasks
from support.workers import WorkerRunner

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_builds_strict(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    api = (tmp_path / "reference" / "clients" / "index.html").read_text()
    assert "enqueue_many" in api  # the API reference came from the docstrings


def _liveness_probe() -> str:
    """The Python of the Kubernetes livenessProbe in docs/deployment/index.md."""
    lines = (ROOT / "docs" / "deployment" / "index.md").read_text().splitlines()
    start = lines.index("                - |") + 1
    body = []
    for line in lines[start:]:
        if not line.startswith(" " * 18):
            break
        body.append(line)
    return textwrap.dedent("\n".join(body))


def test_the_liveness_probe(redis_url: str, worker_runner: WorkerRunner) -> None:
    queue = f"images-{os.getpid()}"
    probe = _liveness_probe().replace('Queue("images")', f'Queue("{queue}")')
    assert "queue.workers()" in probe and socket.gethostname()

    def check() -> int:
        env = {**os.environ, "CONVEYOR_REDIS_URL": redis_url}
        return subprocess.run([sys.executable, "-c", probe], env=env, timeout=60).returncode

    assert check() == 1  # no worker yet
    tasks = Tasks(queue, url=redis_url)
    running = worker_runner.start(tasks)
    assert running.thread.is_alive()
    assert _eventually(lambda: check() == 0)
    running.stop()
    assert check() == 1  # a worker that stops leaves the roll call


def _eventually(condition: Callable[[], bool], attempts: int = 40) -> bool:
    """The worker joins the roll call once connected: wait for that, up to 20 s."""
    for _ in range(attempts):
        if condition():
            return True
        time.sleep(0.5)
    return False

"""The opening examples of the guide's pages run as written, against a private Redis.

Each page of the manual opens with a runnable example; these tests take the Python blocks
straight from the markdown, so an example that stops working fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.servers import ServerFactory

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide"
_PYTHON = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(page: str) -> list[str]:
    return _PYTHON.findall((GUIDE / page).read_text())


def run(code: str, url: str, cwd: Path, timeout: float = 60) -> str:
    env = {
        **os.environ,
        "CONVEYOR_REDIS_URL": url,
        "PYTHONPATH": f"{cwd}{os.pathsep}" + os.environ.get("PYTHONPATH", ""),
    }
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def url(server_factory: ServerFactory) -> str:
    return server_factory().url


def test_jobs_opening_example(url: str, tmp_path: Path) -> None:
    out = run(blocks("jobs.md")[0], url, tmp_path).splitlines()
    assert out[0] == "delayed"


def test_scheduling_examples(url: str, tmp_path: Path) -> None:
    for code in blocks("scheduling.md")[:2]:
        run(code, url, tmp_path)


def test_limits_opening_example(url: str, tmp_path: Path) -> None:
    assert run(blocks("limits.md")[0], url, tmp_path).strip() == "['tenant-7']"


def test_dedup_opening_example(url: str, tmp_path: Path) -> None:
    assert run(blocks("dedup.md")[0], url, tmp_path).strip() == "created updated"


def test_flows_opening_example_with_a_worker(url: str, tmp_path: Path) -> None:
    (tmp_path / "flows_app.py").write_text(blocks("flows.md")[0])
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "CONVEYOR_REDIS_URL": url, "PYTHONPATH": path}
    command = ["worker", "flows_app:reports", "--queues", "reports,fetchers"]
    with (tmp_path / "worker.log").open("w") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "conveyor", *command],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=log,
        )
    try:
        script = "import runpy; runpy.run_path('flows_app.py', run_name='__main__')"
        out = run(script, url, tmp_path)
        assert "'sizes'" in out and "'skipped': []" in out, out
    finally:
        worker.terminate()
        worker.wait(timeout=30)

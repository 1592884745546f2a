"""docs/getting-started.md, run as written: app.py, the worker line (with -v, a line per job),
the enqueue line, and the "Watch a job" step (the record's progress, `conveyor jobs show`),
against a private redis-server."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from conveyor import JobState, Queue
from support.servers import ServerFactory

PAGE = Path(__file__).resolve().parents[1] / "docs" / "getting-started.md"
SRC = Path(__file__).resolve().parents[1] / "src"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", PAGE.read_text(), re.MULTILINE | re.DOTALL)


def _line(start: str) -> str:
    """The first shell line of the page that starts with `start`, without its comment."""
    for block in _blocks("sh"):
        for line in block.splitlines():
            if line.startswith(start):
                return line.partition("  #")[0].strip()
    raise AssertionError(f"no line starting {start!r} in {PAGE.name}")


def _run(args: list[str], cwd: Path, url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CONVEYOR_REDIS_URL": url, "PYTHONPATH": f"{cwd}{os.pathsep}{SRC}"}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def _conveyor(line: str) -> list[str]:
    words = shlex.split(line)
    assert words[0] == "conveyor", line
    return [sys.executable, "-m", "conveyor", *words[1:]]


def test_getting_started_shows_the_job_run_and_its_progress(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    url = server_factory().url
    [app] = [b for b in _blocks("python") if b.startswith("# app.py")]
    (tmp_path / "app.py").write_text(app)

    python, *rest = shlex.split(_line("python -c"))
    assert python == "python"
    enqueue = _run([sys.executable, *rest], tmp_path, url)
    assert enqueue.returncode == 0, enqueue.stderr
    [job_id] = re.findall(r"id='([^']+)'", enqueue.stdout)

    worker = _line("conveyor worker app:tasks")
    assert " -v" in worker  # the page shows a line per job
    ran = _run([*_conveyor(worker), "--burst"], tmp_path, url)
    assert ran.returncode == 0, ran.stderr
    assert f"job {job_id} (thumbnail, attempt 1) started" in ran.stderr, ran.stderr
    assert f"job {job_id} (thumbnail, attempt 1) completed in" in ran.stderr, ran.stderr
    assert "-v logs a line per job" not in ran.stdout

    with Queue("images", url=url) as queue:
        job = queue.get(job_id)
        assert job is not None and job.state is JobState.COMPLETED
        assert job.progress == 0.5  # progress(1, 2), as the page says

    example_id = re.search(r"conveyor jobs show images (\S+)", PAGE.read_text())
    assert example_id is not None
    show = _line("conveyor jobs show images").replace(example_id.group(1), job_id)
    shown = _run(_conveyor(show), tmp_path, url)
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"progress: 0\.5\b", shown.stdout), shown.stdout

    quiet = _run([*_conveyor(worker.replace(" -v", "")), "--burst"], tmp_path, url)
    assert quiet.returncode == 0, quiet.stderr
    assert "-v logs a line per job (failures are logged anyway)" in quiet.stdout
    assert "started" not in quiet.stderr

"""The worker's log lines (text and JSON, -v after the subcommand) and the
job's own log, read back through the API and `conveyor log`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest
from click.testing import CliRunner

from conveyor import AsyncQueue, Queue
from conveyor.integrations.cli import main
from conveyor.integrations.logs import hoist_logging_options
from support.workers import APPS, SRC


def run_worker(url: str, queue: str, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conveyor.integrations.cli", "worker", "observe_app:tasks",
         "--url", url, "--burst", *options],
        env={"PYTHONPATH": f"{APPS}:{SRC}", "TEST_QUEUE": queue, "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_json_lines_for_every_job_and_its_handler(
    redis_url: str, queue_name: str, sync_queue: Queue
) -> None:
    ok = sync_queue.enqueue("chatty", {"n": 1})
    bad = sync_queue.enqueue("broken", 7)
    proc = run_worker(redis_url, queue_name, "--log-format", "json", "-v")
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    about: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        if "job_id" in record:
            about.setdefault(record["job_id"], []).append(record)
    for record in about[ok.id] + about[bad.id]:
        assert record["queue"] == queue_name and record["attempt"] == 1
    assert [r["task"] for r in about[ok.id]] == ["chatty"] * 3
    started, hello, completed = about[ok.id]
    assert started["message"].endswith("started") and started["level"] == "info"
    assert hello["message"] == "chatty says hello" and hello["logger"] == "observe_app"
    assert " completed in " in completed["message"] and completed["logger"] == "conveyor.jobs"
    failed = about[bad.id][-1]
    assert failed["level"] == "warning" and "failed for good" in failed["message"]
    assert "PermanentError: broken on purpose: 7" in failed["message"]
    assert "Traceback (most recent call last)" in failed["message"]


def test_text_lines_with_v_after_the_subcommand_and_none_by_default(
    redis_url: str, queue_name: str, sync_queue: Queue
) -> None:
    job = sync_queue.enqueue("chatty_sync", 5)
    proc = run_worker(redis_url, queue_name, "-v")
    assert proc.returncode == 0, proc.stderr
    assert f"INFO conveyor.jobs: job {job.id} (chatty_sync, attempt 1) started" in proc.stderr
    assert f"job {job.id} (chatty_sync, attempt 1) completed in " in proc.stderr
    sync_queue.enqueue("chatty_sync", 6)
    bad = sync_queue.enqueue("broken", 8)
    quiet = run_worker(redis_url, queue_name)  # the default level: warning
    assert quiet.returncode == 0, quiet.stderr
    assert "started" not in quiet.stderr and "completed in" not in quiet.stderr
    # a final failure shows by default, with its traceback
    line = f"WARNING conveyor.jobs: job {bad.id} (broken, attempt 1) failed for good: "
    assert line + "PermanentError: broken on purpose: 8" in quiet.stderr
    assert "Traceback (most recent call last)" in quiet.stderr
    assert "1 completed, 1 failed" in quiet.stdout


def test_the_job_log_through_the_api_and_the_cli(
    redis_url: str, queue_name: str, sync_queue: Queue
) -> None:
    a = sync_queue.enqueue("chatty", None)
    b = sync_queue.enqueue("chatty_sync", 3)
    assert run_worker(redis_url, queue_name).returncode == 0
    assert sync_queue.job_log(a.id) == ["first line", "second line"]
    assert sync_queue.job_log(b.id) == ["sync line 3"]

    async def read_async() -> list[str]:
        async with AsyncQueue(queue_name, url=redis_url) as aq:
            return await aq.job_log(a.id)

    assert asyncio.run(read_async()) == ["first line", "second line"]
    runner = CliRunner()
    shown = runner.invoke(main, ["log", queue_name, a.id, "--url", redis_url])
    assert shown.exit_code == 0 and shown.output == "first line\nsecond line\n"
    as_json = runner.invoke(main, ["log", queue_name, b.id, "--url", redis_url, "--json"])
    assert json.loads(as_json.output) == ["sync line 3"]
    missing = runner.invoke(main, ["log", queue_name, "nope", "--url", redis_url])
    assert missing.exit_code == 1 and "no job 'nope'" in missing.output
    # a logging handler sends the records of a job's run to its log
    c = sync_queue.enqueue("logged", None)
    assert run_worker(redis_url, queue_name).returncode == 0
    assert sync_queue.job_log(c.id) == [
        "INFO observe_app.joblog: step 1 of 2", "WARNING observe_app.joblog: step 2 of 2"
    ]  # fmt: skip
    # the log goes with its record
    assert sync_queue.remove(a.id) == "removed"
    assert sync_queue.job_log(a.id) == []


@pytest.mark.parametrize(
    ("given", "parsed"),
    [
        (["worker", "app:t", "-v"], ["-v", "worker", "app:t"]),
        (["worker", "app:t", "-vv", "--log-format", "json"],
         ["-vv", "--log-format", "json", "worker", "app:t"]),
        (["info", "--log-level=debug", "q"], ["--log-level=debug", "info", "q"]),
        (["enqueue", "q", "t", "--", "-v"], ["enqueue", "q", "t", "--", "-v"]),
    ],
)  # fmt: skip
def test_logging_options_move_before_the_subcommand(given: list[str], parsed: list[str]) -> None:
    assert hoist_logging_options(given) == parsed

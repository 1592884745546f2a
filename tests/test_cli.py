"""The `conveyor` command line, against the session's private server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner

from conveyor import JobState, Queue
from conveyor.integrations.cli import main
from support.workers import APPS, SRC


def test_enqueue_and_info(redis_url: str, queue_name: str) -> None:
    runner = CliRunner()
    done = runner.invoke(
        main, ["enqueue", queue_name, "send", '{"to": "a"}', "--url", redis_url, "--id", "j1"]
    )
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout) == {"id": "j1", "outcome": "created", "state": "waiting"}
    info = runner.invoke(main, ["info", queue_name, "--url", redis_url])
    assert info.exit_code == 0, info.output
    report = json.loads(info.output)
    assert report["counts"]["waiting"] == 1 and report["workers"] == []


def test_info_reads_workers_of_another_implementation_tolerantly(
    redis_url: str, queue_name: str, sync_queue: Queue, redis_client: object
) -> None:
    # protocol §8.1: info SHOULD be a JSON object; a reader MUST NOT crash on anything else
    keys = sync_queue.core.keys
    infos = {"w-list": "[1, 2]", "w-text": "not json", "w-ok": '{"pid": 7}'}
    for worker_id, info in infos.items():
        redis_client.zadd(keys.workers, {worker_id: 2**50})  # type: ignore[attr-defined]
        redis_client.set(keys.worker(worker_id), info)  # type: ignore[attr-defined]
    report = CliRunner().invoke(main, ["info", queue_name, "--url", redis_url])
    assert report.exit_code == 0, report.output
    workers = {w["id"]: w for w in json.loads(report.output)["workers"]}
    assert workers["w-ok"]["pid"] == 7
    assert workers["w-list"]["unreadable"] == "[1, 2]"
    assert workers["w-text"]["unreadable"] == "not json"


def test_worker_burst_drains_and_exits(redis_url: str, queue_name: str, sync_queue: Queue) -> None:
    sync_queue.enqueue_many([("sleepy", {"seconds": 0}) for _ in range(30)])
    proc = subprocess.run(
        [sys.executable, "-m", "conveyor.integrations.cli", "worker", "kill_app:tasks",
         "--url", redis_url, "--burst"],
        env={"PYTHONPATH": f"{APPS}:{SRC}", "TEST_QUEUE": queue_name, "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "30 completed, 0 failed" in proc.stdout
    assert sync_queue.counts()[JobState.COMPLETED] == 30


def _burst_worker(redis_url: str, queue_name: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "conveyor.integrations.cli", "worker", "kill_app:tasks",
         "--url", redis_url, "--burst"],
        env={"PYTHONPATH": f"{APPS}:{SRC}", "TEST_QUEUE": queue_name, "PATH": "/usr/bin:/bin"},
        capture_output=True, timeout=60,
    )  # fmt: skip


def _watch(redis_url: str, queue_name: str, work: Callable[[], None]) -> str:
    """`conveyor watch`'s output while `work` runs in a thread."""
    thread = threading.Thread(target=work)
    thread.start()
    shown = CliRunner().invoke(main, ["watch", queue_name, "--url", redis_url, "--timeout", "30"])
    thread.join(60)
    assert shown.exit_code == 0, shown.output
    return shown.output + (shown.stderr if shown.stderr_bytes is not None else "")


def test_watch_shows_a_progress_bar(redis_url: str, queue_name: str, sync_queue: Queue) -> None:
    sync_queue.enqueue_many([("sleepy", {"seconds": 0}) for _ in range(20)])

    def work_soon() -> None:
        time.sleep(1.0)
        _burst_worker(redis_url, queue_name)

    shown_text = _watch(redis_url, queue_name, work_soon)
    assert "20/20" in shown_text and "100%" in shown_text


def test_the_default_concurrency_is_100_for_async_tasks_and_10_with_a_sync_one() -> None:
    from conveyor.client.tasks import Tasks
    from conveyor.integrations.cli import default_concurrency

    tasks = Tasks("q", url="redis://127.0.0.1:1/0")

    @tasks.task
    async def fetch(data: None) -> None: ...

    assert default_concurrency(tasks) == 100

    @tasks.task(executor="process")
    async def crunch(data: None) -> None: ...

    assert default_concurrency(tasks) == 10  # a process handler holds a child per job

    only_sync = Tasks("q", url="redis://127.0.0.1:1/0")

    @only_sync.task
    def resize(data: None) -> None: ...

    assert default_concurrency(only_sync) == 10
    assert default_concurrency(Tasks("q", url="redis://127.0.0.1:1/0")) == 10


def test_a_refusal_names_its_error_class() -> None:
    """The command's refusals name the exception the docs name (a worker's
    settings refused: ConfigurationError), exit status 2."""
    tests = Path(__file__).parent
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tests), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-m", "conveyor", "worker", "support.multi_app:high", "--url", "ftp://x"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("error: ConfigurationError: url 'ftp://x' is not a Redis URL")


def test_watch_started_before_the_jobs_counts_those_added_meanwhile(
    redis_url: str, queue_name: str, sync_queue: Queue
) -> None:
    """With nothing queued, `watch` waits for the first job (rather than
    ending at once on 0/0) and counts the jobs added while it runs."""

    def enqueue_then_work() -> None:
        time.sleep(1.0)
        sync_queue.enqueue_many([("sleepy", {"seconds": 0}) for _ in range(12)])
        sync_queue.enqueue("sleepy", {"seconds": 0})
        _burst_worker(redis_url, queue_name)

    shown_text = _watch(redis_url, queue_name, enqueue_then_work)
    assert "13/13" in shown_text and "100%" in shown_text

"""The operator CLI answers the same way everywhere: --prefix and --json on
the commands that lacked them, a reason for every control not applied, UTC and
ISO dates, a note for an unknown group, the queues' every state."""

from __future__ import annotations

import json
from typing import Any

from click.testing import CliRunner

from conveyor import Queue
from conveyor.client.models import QueueSettings
from conveyor.integrations.cli import main
from support.workers import WorkerRunner, wait_until


def _cli(*args: str, url: str) -> Any:
    return CliRunner().invoke(main, [*args, "--url", url])


def test_not_applied_says_why(redis_url: str, queue_name: str, sync_queue: Queue) -> None:
    sync_queue.enqueue("t", None, id="w1")
    shown = _cli("retry", queue_name, "w1", "nope", url=redis_url)
    assert shown.exit_code == 1
    assert "w1: not applied: it is waiting, not failed" in shown.output
    assert "nope: not applied: no such job" in shown.output
    promoted = json.loads(_cli("promote", queue_name, "w1", "--json", url=redis_url).output)
    assert promoted == {"w1": "not applied: it is waiting, not delayed"}


def test_pause_and_resume_answer_in_json_and_name_an_unknown_group(
    redis_url: str, queue_name: str, sync_queue: Queue
) -> None:
    sync_queue.enqueue("t", None, group="g1")
    paused = json.loads(_cli("pause", queue_name, "--json", url=redis_url).output)
    assert paused["paused"] is True and sync_queue.overview().paused
    resumed = _cli("resume", queue_name, "--json", url=redis_url)
    assert json.loads(resumed.output)["resumed"] is True
    shown = _cli("pause", queue_name, "--group", "no-such-group", url=redis_url)
    assert shown.exit_code == 0 and "no job of group 'no-such-group' waits or runs" in shown.output
    known = _cli("pause", queue_name, "--group", "g1", url=redis_url)
    assert known.output.strip() == f"paused {queue_name} group g1"


def test_info_lists_queues_dates_workers_in_iso_and_takes_a_prefix(
    redis_url: str, queue_name: str, worker_runner: WorkerRunner
) -> None:
    from conveyor.client.tasks import Tasks

    other = Queue(queue_name, url=redis_url, settings=QueueSettings(prefix="elsewhere"))
    other.enqueue("t", None, id="e1")
    listed = json.loads(_cli("info", "--prefix", "elsewhere", url=redis_url).output)
    assert queue_name in listed["queues"]
    tasks = Tasks(queue_name, url=redis_url, settings=QueueSettings(prefix="elsewhere"))
    worker_runner.start(tasks)
    wait_until(lambda: bool(other.workers()), timeout=20)
    # stdout only: the worker thread's log lines may reach the runner's stderr
    shown = json.loads(_cli("info", queue_name, "--prefix", "elsewhere", url=redis_url).stdout)
    (worker,) = shown["workers"]
    assert worker["started_at"].endswith("+00:00") and worker["beat_at"].endswith("+00:00")
    flow = _cli("flow", queue_name, "e1", "--prefix", "elsewhere", url=redis_url)
    assert flow.exit_code == 0 and json.loads(flow.output)["ref"].endswith("e1")
    other.close()


def test_the_queues_table_shows_every_state_and_dates_say_utc(
    redis_url: str, queue_name: str, sync_queue: Queue
) -> None:
    sync_queue.enqueue("t", None, id="j1")
    table = _cli("queues", url=redis_url).output
    assert "blocked" in table.splitlines()[0] and "waiting_children" in table.splitlines()[0]
    listed = _cli("jobs", "list", queue_name, url=redis_url).output
    assert " UTC" in listed


def test_abort_log_enqueue_and_watch_take_a_prefix(redis_url: str, queue_name: str) -> None:
    other = Queue(queue_name, url=redis_url, settings=QueueSettings(prefix="elsewhere"))
    added = _cli("enqueue", queue_name, "t", '{"a": 1}', "--id", "p1", "--force",
                 "--prefix", "elsewhere", url=redis_url)  # fmt: skip
    assert added.exit_code == 0, added.output
    assert other.get("p1") is not None
    assert _cli("log", queue_name, "p1", "--prefix", "elsewhere", url=redis_url).exit_code == 0
    aborted = _cli("abort", queue_name, "p1", "--prefix", "elsewhere", "--json", url=redis_url)
    assert json.loads(aborted.output)["outcome"] == "cancelled"
    again = _cli("abort", queue_name, "p1", "--prefix", "elsewhere", url=redis_url)
    assert again.exit_code == 1 and "not aborted" in again.output
    watched = _cli("watch", queue_name, "--prefix", "elsewhere", "--total", "0", "--timeout",
                   "1", url=redis_url)  # fmt: skip
    assert "no such option" not in watched.output
    other.close()

"""`conveyor workers` (the Busy view, quiet, stop) and `conveyor audit`, through
click's CliRunner against the session's Redis and a real worker."""

from __future__ import annotations

import asyncio
import getpass
import json
import socket
from typing import Any

from click.testing import CliRunner

from conveyor import JobState, Queue
from conveyor.client.tasks import Tasks
from conveyor.integrations.cli import main
from support.workers import WorkerRunner, wait_until


def _run(*args: str, url: str) -> Any:
    return CliRunner().invoke(main, [*args, "--url", url])


def _tasks(redis_url: str, queue_name: str) -> Tasks:
    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task
    async def slow(data: int) -> int:
        await asyncio.sleep(30)  # until the worker is stopped
        return data

    return tasks


def test_busy_quiet_stop_and_the_audit_trail(
    redis_url: str, queue_name: str, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    job = sync_queue.enqueue("slow", 1)
    running = worker_runner.start(_tasks(redis_url, queue_name), heartbeat_interval=0.2,
                                  grace=0.1)  # fmt: skip
    wait_until(lambda: sync_queue.counts()[JobState.ACTIVE] == 1, timeout=20)
    (worker,) = sync_queue.workers()

    listed = _run("workers", "list", queue_name, "--json", url=redis_url)
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.output)
    assert row["id"] == worker.id and row["quiet"] is False
    assert [j["id"] for j in row["jobs"]] == [job.id]
    assert row["jobs"][0]["task"] == "slow" and row["jobs"][0]["running_for"] >= 0
    text = _run("workers", "list", queue_name, url=redis_url).output
    assert worker.id in text and job.id in text and "MiB" in text
    assert "started " in text and "UTC UTC" not in text  # the date says UTC once

    quiet = _run("workers", "quiet", queue_name, worker.id, url=redis_url)
    assert quiet.exit_code == 0, quiet.output
    wait_until(lambda: sync_queue.workers()[0].info.get("quiet") is True, timeout=20)
    unknown = _run("workers", "stop", queue_name, "no-such-worker", url=redis_url)
    assert unknown.exit_code != 0 and "no live worker" in unknown.output
    not_failed = _run("retry", queue_name, job.id, url=redis_url)
    assert not_failed.exit_code == 1
    stop = _run("workers", "stop", queue_name, worker.id, url=redis_url)
    assert stop.exit_code == 0, stop.output
    running.thread.join(20)
    assert not running.thread.is_alive()

    trail = json.loads(_run("audit", queue_name, "--json", url=redis_url).output)
    who = f"{getpass.getuser()}@{socket.gethostname()}"
    assert [(e["action"], e["target"], e["source"], e["who"]) for e in trail] == [
        ("stop", worker.id, "cli", who), ("retry", job.id, "cli", who),
        ("stop", "no-such-worker", "cli", who), ("quiet", worker.id, "cli", who),
    ]  # fmt: skip
    assert trail[1]["outcome"] == f"{job.id}: not applied: it is active, not failed"
    assert trail[2]["outcome"] == f"refused: no live worker 'no-such-worker' in {queue_name!r}"
    assert trail[3]["outcome"] == f"asked {worker.id} to quiet"
    table = _run("audit", queue_name, url=redis_url).output
    assert "quiet" in table and who in table
    # reading changes nothing: no entry for list, audit or show
    assert len(json.loads(_run("audit", queue_name, "--json", url=redis_url).output)) == 4


def test_the_failure_lane_is_listed_and_opened_as_queue_colon_failures(
    redis_url: str, queue_name: str, sync_queue: Queue
) -> None:
    sync_queue.enqueue("t", None)
    lane_job = sync_queue.failure_lane().enqueue("t", None)
    rows = json.loads(_run("queues", "--json", url=redis_url).output)
    mine = {r["queue"]: r for r in rows if r["queue"].startswith(queue_name)}
    assert set(mine) == {queue_name, f"{queue_name}:failures"}
    assert mine[f"{queue_name}:failures"]["counts"]["waiting"] == 1
    listed = _run("jobs", "list", f"{queue_name}:failures", "--json", url=redis_url)
    assert listed.exit_code == 0, listed.output
    assert lane_job.id in listed.output
    assert _run("jobs", "list", f"{queue_name}:other", url=redis_url).exit_code != 0

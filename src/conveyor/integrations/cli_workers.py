"""`conveyor workers` (the Busy view: live workers, what each runs, quiet and
stop) and `conveyor audit` (operators' actions on a queue)."""

from __future__ import annotations

import time
from typing import Any

import click

from conveyor.client.sync import Queue
from conveyor.errors import WorkerNotFoundError
from conveyor.integrations.cli_audit import note
from conveyor.integrations.cli_options import emit, open_queue, queue_options, table, when
from conveyor.job import JobState

BUSY_SHOWN = 500  # running jobs read at most (soonest lease deadline first)


@click.group()
def workers() -> None:
    """The live workers of a queue: what they run, quiet, stop."""


def busy(queue: Queue) -> list[dict[str, Any]]:
    """Each live worker with its running jobs (of the first BUSY_SHOWN)."""
    ids = queue.job_ids(JobState.ACTIVE, limit=BUSY_SHOWN)
    running = [j for j in queue.get_many(ids) if j is not None]
    now = time.time()
    rows = []
    for w in sorted(queue.workers(), key=lambda w: str(w.info.get("host", ""))):
        jobs = [{"id": j.id, "task": j.task, "started_at": j.started_at, "progress": j.progress,
                 "running_for": None if j.started_at is None else now - j.started_at.timestamp()}
                for j in running if j.worker == w.id]  # fmt: skip
        info = w.info
        rows.append({"id": w.id, "host": info.get("host"), "pid": info.get("pid"),
                     "concurrency": info.get("concurrency"), "running": info.get("running"),
                     "quiet": bool(info.get("quiet")), "rss": info.get("rss"),
                     "cpu": info.get("cpu"), "started_at": info.get("started_at"),
                     "jobs": jobs})  # fmt: skip
    return rows


def _mib(value: Any) -> str:
    return f"{value / 2**20:.0f} MiB" if isinstance(value, int | float) else "-"


def _busy_text(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no live worker"
    lines = [table(
        ["worker", "host", "pid", "busy", "rss", "cpu", "state"],
        [[r["id"], r["host"], r["pid"], f"{r['running']}/{r['concurrency']}", _mib(r["rss"]),
          "-" if r["cpu"] is None else f"{r['cpu']:.0f} %", "quiet" if r["quiet"] else "running"]
         for r in rows],
    )]  # fmt: skip
    for r in rows:
        for j in r["jobs"]:
            progress = "-" if j["progress"] is None else f"{j['progress']:.0%}"
            ran = "-" if j["running_for"] is None else f"{j['running_for']:.1f} s"
            lines.append(f"  {r['id']}  {j['id']}  {j['task']}  started {when(j['started_at'])}  "
                         f"running {ran}  progress {progress}")  # fmt: skip
    return "\n".join(lines)


@workers.command("list")
@click.argument("queue")
@queue_options
def list_workers(queue: str, url: str | None, prefix: str, as_json: bool) -> None:
    """Live workers of QUEUE: busy slots, memory, CPU, quiet, and the jobs each runs."""
    with open_queue(queue, url, prefix) as q:
        rows = busy(q)
    emit(as_json, rows, lambda: _busy_text(rows))


def _command(verb: str, summary: str) -> click.Command:
    @click.command(verb, help=summary)
    @click.argument("queue")
    @click.argument("worker_id")
    @queue_options
    def command(queue: str, worker_id: str, url: str | None, prefix: str, as_json: bool) -> None:
        with open_queue(queue, url, prefix) as q:
            try:
                (q.quiet_worker if verb == "quiet" else q.stop_worker)(worker_id)
            except WorkerNotFoundError as exc:
                raise click.ClickException(str(exc)) from exc
            note(f"asked {worker_id} to {verb}")
        emit(as_json, {"worker": worker_id, "command": verb},
             lambda: f"asked worker {worker_id} to {verb}")  # fmt: skip

    return command


workers.add_command(_command("quiet", "Have worker WORKER_ID of QUEUE claim no more jobs "
                                      "(it finishes those it runs; stop it after)."))  # fmt: skip
workers.add_command(_command("stop", "Stop worker WORKER_ID of QUEUE as on SIGTERM."))


@click.command()
@click.argument("queue")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@queue_options
def audit(queue: str, limit: int, url: str | None, prefix: str, as_json: bool) -> None:
    """Operators' actions on QUEUE (dashboard and CLI), newest first."""
    with open_queue(queue, url, prefix) as q:
        entries = q.audit(count=limit)
    rows = [{"at": e.at, "who": e.who, "action": e.action, "target": e.target,
             "outcome": e.outcome, "source": e.source} for e in entries]  # fmt: skip
    emit(as_json, rows, lambda: table(
        ["at (UTC)", "who", "source", "action", "target", "outcome"],
        [[when(e.at), e.who, e.source, e.action, e.target, e.outcome] for e in entries],
    ) if entries else f"no recorded actions on {queue}")  # fmt: skip


COMMANDS = [workers, audit]

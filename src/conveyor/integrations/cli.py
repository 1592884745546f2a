"""The `conveyor` command line: run workers, inspect queues, run Redis.

The worker command is in cli_worker.py, the operator's in cli_ops.py, the shared
options in cli_options.py; the names they held here are re-exported."""

from __future__ import annotations

import dataclasses
import json
import signal
from datetime import UTC, datetime
from typing import Any

import click

from conveyor.client.flows import FlowNode
from conveyor.client.sync import Queue
from conveyor.errors import ConveyorError
from conveyor.integrations import logs
from conveyor.integrations.cli_audit import note
from conveyor.integrations.cli_jobs import show_job
from conveyor.integrations.cli_observe import log_command
from conveyor.integrations.cli_ops import COMMANDS as OPERATOR_COMMANDS
from conveyor.integrations.cli_ops import jobs, require_queue
from conveyor.integrations.cli_options import (
    emit,
    open_kept,
    open_queue,
    prefix_option,
    queue_options,
)
from conveyor.integrations.cli_options import redis_url as redis_url
from conveyor.integrations.cli_options import url_option as url_option
from conveyor.integrations.cli_worker import ASYNC_CONCURRENCY as ASYNC_CONCURRENCY
from conveyor.integrations.cli_worker import CONCURRENCY as CONCURRENCY
from conveyor.integrations.cli_worker import SYNC_CONCURRENCY as SYNC_CONCURRENCY
from conveyor.integrations.cli_worker import Concurrency as Concurrency
from conveyor.integrations.cli_worker import default_concurrency as default_concurrency
from conveyor.integrations.cli_worker import execution_options as execution_options
from conveyor.integrations.cli_worker import execution_settings as execution_settings
from conveyor.integrations.cli_worker import load_tasks as load_tasks
from conveyor.integrations.cli_worker import metrics_endpoint as metrics_endpoint
from conveyor.integrations.cli_worker import parse_queues as parse_queues
from conveyor.integrations.cli_worker import tasks_of_queues as tasks_of_queues
from conveyor.integrations.cli_worker import worker
from conveyor.integrations.cli_workers import COMMANDS as WORKER_COMMANDS
from conveyor.integrations.embedded import EmbeddedRedis
from conveyor.integrations.progress import ProgressBar, follow


class ConveyorGroup(click.Group):
    """The logging options work after a subcommand too (`conveyor worker app:tasks -v`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, logs.hoist_logging_options(args))


@click.group(cls=ConveyorGroup)
@click.version_option(package_name="conveyor", message="conveyor %(version)s")
@click.option(
    "-v", "--verbose", count=True, help="More logging: -v a line per job (info), -vv debug."
)
@click.option(
    "--log-level",
    type=click.Choice(logs.LEVELS, case_sensitive=False),
    default=None,
    help="Log level (default: warning; overrides -v).",
)
@click.option(
    "--log-format",
    type=click.Choice(logs.FORMATS),
    default="text",
    show_default=True,
    help="json: one object per line, with job_id, task, queue and attempt for jobs.",
)
def main(verbose: int, log_level: str | None, log_format: str) -> None:
    """Conveyor: a Redis-backed job queue.

    The logging options may also follow the subcommand."""
    level = log_level or ["warning", "info", "debug"][min(verbose, 2)]
    logs.configure(level, log_format)


# A worker's self-description holds these as epoch seconds: shown as ISO 8601 dates.
_WORKER_DATES = ("started_at", "beat_at")


@main.command()
@click.argument("queue", required=False)
@url_option
@prefix_option
def info(queue: str | None, url: str | None, prefix: str) -> None:
    """Job counts per state and the live workers of QUEUE, as JSON (dates ISO
    8601, UTC); without QUEUE, the queues on the server."""
    with open_kept(queue or "default", url, prefix) as q:
        if queue is None:
            click.echo(json.dumps({"queues": q.known_queues()}, indent=2))
            return
        seen = require_queue(q)
        counts = {state.value: n for state, n in q.counts().items()}
        workers = [{"id": w.id, **_dated(w.info)} for w in q.workers()]
        # suspects run isolated, one per worker (docs/protocol.md §6.2): named with their worker
        suspects = [{"id": s, "worker": w["id"]} for w in workers for s in w.get("suspects", [])]
        out = {"queue": queue, "protocol_version": seen.protocol_version, "counts": counts}
        click.echo(json.dumps({**out, "suspects_running": suspects, "workers": workers}, indent=2))


def _dated(info: dict[str, Any]) -> dict[str, Any]:
    return {
        k: datetime.fromtimestamp(float(v), UTC).isoformat()
        if k in _WORKER_DATES and isinstance(v, int | float)
        else v
        for k, v in info.items()
    }


@main.command()
@click.argument("queue")
@click.argument("job_id")
@url_option
@prefix_option
@click.option("--offset", type=click.IntRange(min=0), default=0, help="First child shown.")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
def flow(queue: str, job_id: str, url: str | None, prefix: str, offset: int, limit: int) -> None:
    """A flow's node JOB_ID of QUEUE and a page of its children, as JSON: each
    with its state, result, error and counts of children."""
    with open_kept(queue, url, prefix) as q:
        require_queue(q)
        click.echo(json.dumps(_flow_node(q.flow(job_id, offset=offset, limit=limit)), indent=2))


def _flow_node(node: FlowNode) -> dict[str, Any]:
    job = node.job
    out: dict[str, Any] = {
        "ref": node.ref,
        "state": None if job is None else job.state.value,
        "result": None if job is None else job.result,
        "error": None if job is None else job.error,
        "children": dataclasses.asdict(node.counts),
    }
    if node.children:
        out["page"] = [_flow_node(child) for child in node.children]
    return out


@main.command()
@click.argument("queue", default="default")
@url_option
@prefix_option
@click.option(
    "--total",
    type=int,
    default=None,
    help="Jobs to wait for (default: those unfinished now and those added meanwhile).",
)
@click.option("--timeout", type=float, default=3600.0, show_default=True)
def watch(queue: str, url: str | None, prefix: str, total: int | None, timeout: float) -> None:
    """A live progress bar of QUEUE's finished jobs, fed by its events stream.

    Ends when the jobs it counts have finished (with none yet, it waits for
    the first), or after --timeout seconds."""
    with open_kept(queue, url, prefix) as q:
        counts = q.counts()
        pending = sum(
            n for state, n in counts.items() if state.value not in ("completed", "failed")
        )
        bar = ProgressBar(total if total is not None else pending)
        follow(q, bar, after="$", timeout=timeout, count_new=total is None)


@main.command()
@click.argument("queue")
@click.argument("task")
@click.argument("data", default="null")
@url_option
@prefix_option
@click.option("--id", "job_id", default=None)
@click.option("--delay", type=click.FloatRange(min=0), default=None, help="Seconds.")
@click.option("--priority", default=None, help="0 (highest) .. 2097152, or high/normal/low.")
@click.option("--force", is_flag=True, help="Enqueue even if no live worker runs TASK.")
def enqueue(
    queue: str,
    task: str,
    data: str,
    url: str | None,
    prefix: str,
    job_id: str | None,
    delay: float | None,
    priority: str | None,
    force: bool,
) -> None:
    """Enqueue one job of TASK with JSON DATA (a string is quoted: '"abc"')."""
    try:
        payload = json.loads(data)
    except ValueError as exc:
        raise click.BadParameter(
            f"not JSON ({exc}); a string needs JSON quotes, e.g. '\"{data}\"'",
            param_hint="DATA",
        ) from None
    options: dict[str, Any] = {"id": job_id, "delay": delay, "priority": _priority(priority)}
    with open_kept(queue, url, prefix) as q:
        if not force:
            _check_task_runs(q, task)
        done = q.enqueue(task, payload, **{k: v for k, v in options.items() if v is not None})
        click.echo(json.dumps({"id": done.id, "outcome": done.outcome, "state": done.state}))


@main.command()
@click.argument("queue")
@click.argument("job_id")
@queue_options
def abort(queue: str, job_id: str, url: str | None, prefix: str, as_json: bool) -> None:
    """Abort job JOB_ID: cancel it if it has not started, else have its
    worker stop it (it fails with AbortedError). Says what happened."""
    with open_queue(queue, url, prefix) as q:
        what = q.abort(job_id)
        note(what)
    said = _ABORTED.get(what, f"not aborted: {what}")
    emit(as_json, {"id": job_id, "outcome": what, "said": said}, lambda: f"{job_id}: {said}")
    if what in ("missing", "refused", "finished"):
        raise SystemExit(1)


_ABORTED = {
    "aborting": "aborting: its worker stops it, then it fails with AbortedError",
    "cancelled": "cancelled before it started",
    "finished": "not aborted: it has already finished",
    "missing": "not aborted: no such job",
}


def _priority(given: str | None) -> int | str | None:
    """A number (negative ones too, for the client's own range check) or a name."""
    if given is None:
        return None
    try:
        return int(given)
    except ValueError:
        return given


def _check_task_runs(queue: Queue, task: str) -> None:
    """Refuse a task no live worker of the queue runs; warn when none is live."""
    workers = queue.workers()
    if not workers:
        click.echo(
            f"warning: no live worker on queue {queue.name!r}, so task {task!r} is not "
            "checked; a worker without it fails the job",
            err=True,
        )
        return
    known = sorted({str(t) for w in workers for t in w.info.get("tasks", [])})
    if task not in known:
        raise click.UsageError(
            f"no live worker of queue {queue.name!r} runs task {task!r} (they run: "
            f"{', '.join(known) or 'nothing'}); --force enqueues it anyway"
        )


@main.command()
@click.option("--stop", is_flag=True, help="Stop the embedded Redis running here, and exit.")
def redis(stop: bool) -> None:
    """Run the embedded Redis (in ./.conveyor or $CONVEYOR_DATA_DIR) in the
    foreground until Ctrl-C, which stops it: a server already running there
    (started by a worker) is adopted and stopped too."""
    embedded = EmbeddedRedis()
    if stop:
        stopped = embedded.shutdown()
        click.echo(f"stopped the embedded Redis at {embedded.url}" if stopped else "none ran")
        return
    signals = {signal.SIGINT, signal.SIGTERM}
    # blocked, then waited for: no handler runs in the middle of starting the
    # server (the server itself starts with an empty mask: redis_server.py)
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    with embedded:
        adopted = "" if embedded.owned else " (already running: adopted)"
        click.echo(f"embedded Redis at {embedded.url}{adopted}; Ctrl-C stops it")
        signal.sigwait(signals)
        embedded.shutdown()
        click.echo("stopped")


main.add_command(worker)
main.add_command(log_command)
jobs.add_command(show_job)
for command in [*OPERATOR_COMMANDS, *WORKER_COMMANDS]:
    main.add_command(command)


def run() -> None:
    try:
        main(standalone_mode=True)
    except ConveyorError as exc:
        click.echo(f"error: {type(exc).__name__}: {exc}", err=True)
        raise SystemExit(2) from exc


if __name__ == "__main__":
    run()

"""The operator's commands: queues, jobs, retry, cancel, remove, promote,
pause / resume, schedules, purge and the dashboard. Tables for people,
`--json` for scripts."""

from __future__ import annotations

import sys
from typing import Any

import click

from conveyor.client.events import Event
from conveyor.client.inspect import PURGEABLE, Limits, QueueOverview
from conveyor.client.sync import Queue
from conveyor.integrations.cli_options import (
    emit,
    open_queue,
    prefix_option,
    queue_options,
    resolved_url,
    table,
    url_option,
    when,
)
from conveyor.integrations.cli_spark import archive, report
from conveyor.job import FINISHED_STATES, Job, JobState

LISTED = [s.value for s in JobState if s is not JobState.WAITING_CHILDREN]
COUNTED = ("waiting", "delayed", "active", "completed", "failed")


def _limits(value: Limits) -> str:
    parts = [] if value.concurrency is None else [f"{value.concurrency} at once"]
    if value.rate is not None:
        parts.append(f"{value.rate} per {value.per:g} s")
    return ", ".join(parts) or "none"


def _overview_json(seen: QueueOverview, workers: int) -> dict[str, Any]:
    return {
        "queue": seen.name,
        "exists": seen.exists,
        "paused": seen.paused,
        "counts": {state.value: n for state, n in seen.counts.items()},
        "workers": workers,
        "limits": {"concurrency": seen.limits.concurrency, "rate": seen.limits.rate,
                   "per": seen.limits.per},
        "groups": [{"name": g.name, "waiting": g.waiting, "running": g.running,
                    "paused": g.paused} for g in seen.groups],
    }  # fmt: skip


def require_queue(queue: Queue) -> QueueOverview:
    """The overview of a queue some client or worker used; exit 1 saying so otherwise."""
    seen = queue.overview()
    if not seen.exists and not any(seen.counts.values()) and not queue.workers():
        known = ", ".join(queue.known_queues()) or "none"
        raise click.ClickException(f"no queue named {queue.name!r} (known queues: {known})")
    return seen


@click.command()
@queue_options
def queues(url: str | None, prefix: str, as_json: bool) -> None:
    """Every queue on the server: jobs per state, workers, paused."""
    with open_queue("default", url, prefix) as any_queue:
        names = any_queue.known_queues()
        rows = []
        for name in names:
            with Queue(name, client=any_queue.client, settings=any_queue.core.settings) as q:
                rows.append(_overview_json(q.overview(), len(q.workers())))
    emit(as_json, rows, lambda: table(
        ["queue", *COUNTED, "workers", "paused"],
        [[r["queue"], *(r["counts"][s] for s in COUNTED), r["workers"],
          "paused" if r["paused"] else ""] for r in rows],
    ) if rows else "no queues registered on this server")  # fmt: skip


def _job_json(job: Job) -> dict[str, Any]:
    return {
        "id": job.id, "queue": job.queue, "state": job.state.value, "task": job.task,
        "data": job.data, "priority": job.priority, "attempts": job.attempts,
        "failures": job.failures, "stalls": job.stalls, "progress": job.progress,
        "result": job.result, "error": job.error, "worker": job.worker, "group": job.group,
        "created_at": job.created_at, "run_at": job.run_at, "started_at": job.started_at,
        "finished_at": job.finished_at,
    }  # fmt: skip


@click.group()
def jobs() -> None:
    """List a queue's jobs by state, or show one."""


@jobs.command("list")
@click.argument("queue")
@click.argument("state", type=click.Choice(LISTED), default="waiting")
@click.option("--group", default=None, help="Waiting jobs of one group.")
@click.option("--offset", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@queue_options
def list_jobs(
    queue: str, state: str, group: str | None, offset: int, limit: int,
    url: str | None, prefix: str, as_json: bool,
) -> None:  # fmt: skip
    """Jobs of QUEUE in STATE, a page at a time: waiting in run order, delayed
    soonest first, completed and failed newest first."""
    with open_queue(queue, url, prefix) as q:
        seen = require_queue(q)
        newest_first = JobState(state) in FINISHED_STATES
        ids = q.job_ids(state, group=group, offset=offset, limit=limit, reverse=newest_first)
        found = [j for j in q.get_many(ids) if j is not None]
    total = seen.counts[JobState(state)]
    rows = [_job_json(j) for j in found]
    emit(as_json, rows, lambda: "\n".join([
        table(["id", "task", "priority", "attempts", "group", "created", "run at", "finished"],
              [[j.id, j.task, j.priority, j.attempts, j.group, when(j.created_at),
                when(j.run_at), when(j.finished_at)] for j in found]),
        f"{offset + 1 if found else 0}-{offset + len(found)} of {total} {state}",
    ]))  # fmt: skip


@jobs.command("show")
@click.argument("queue")
@click.argument("job_id")
@queue_options
def show_job(queue: str, job_id: str, url: str | None, prefix: str, as_json: bool) -> None:
    """One job: its record and its recent events."""
    with open_queue(queue, url, prefix) as q:
        job = q.get(job_id)
        if job is None:
            raise click.ClickException(f"no job {job_id!r} in queue {queue!r}")
        events = q.job_events(job_id)
    payload = {**_job_json(job), "events": [
        {"at": e.at, "event": e.name, **e.fields} for e in events]}  # fmt: skip

    def text() -> str:
        fields = [(k, when(v) if k.endswith("_at") else v) for k, v in _job_json(job).items()]
        lines = [f"{k:>12}: {v}" for k, v in fields if k != "error"]
        if job.error:
            lines += ["", "error:", job.error]
        lines += ["", "events:"] + [_event_line(e) for e in events]
        return "\n".join(lines)

    emit(as_json, payload, text)


def _event_line(event: Event) -> str:
    """One event on a line; an error by its last line (a traceback's message)."""
    fields = " ".join(f"{k}={v}" for k, v in event.fields.items() if k != "error")
    error = (event.fields.get("error") or "").strip()
    message = f"error: {error.splitlines()[-1]}" if error else ""
    parts = [when(event.at), event.name, fields, message]
    return "  " + "  ".join(p for p in parts if p)


def _each(queue: str, ids: tuple[str, ...], url: str | None, prefix: str, as_json: bool,
          act: str) -> None:  # fmt: skip
    """Apply one job control to each id; exit 1 when any was not applied."""
    outcomes: dict[str, str] = {}
    with open_queue(queue, url, prefix) as q:
        for job_id in ids:
            if act == "remove":
                outcomes[job_id] = q.remove(job_id)
            else:
                done = {"retry": q.retry, "cancel": q.cancel, "promote": q.promote}[act](job_id)
                outcomes[job_id] = "done" if done else "not applied"
    emit(as_json, outcomes, lambda: "\n".join(f"{i}: {o}" for i, o in outcomes.items()))
    if any(o not in ("done", "removed") for o in outcomes.values()):
        sys.exit(1)


def _control(act: str, summary: str) -> click.Command:
    @click.command(act, help=summary)
    @click.argument("queue")
    @click.argument("job_ids", nargs=-1, required=True)
    @queue_options
    def command(
        queue: str, job_ids: tuple[str, ...], url: str | None, prefix: str, as_json: bool
    ) -> None:
        _each(queue, job_ids, url, prefix, as_json, act)

    return command


cancel = _control("cancel", "Cancel waiting or delayed jobs of QUEUE.")
remove = _control("remove", "Delete jobs of QUEUE that are not running.")
promote = _control("promote", "Run delayed jobs of QUEUE now.")


@click.command()
@click.argument("queue")
@click.argument("job_ids", nargs=-1)
@click.option("--all-failed", is_flag=True, help="Retry every failed job of QUEUE.")
@queue_options
def retry(
    queue: str, job_ids: tuple[str, ...], all_failed: bool,
    url: str | None, prefix: str, as_json: bool,
) -> None:  # fmt: skip
    """Run failed jobs of QUEUE again (JOB_IDS, or --all-failed)."""
    if all_failed == bool(job_ids):
        raise click.UsageError("give job ids or --all-failed (not both)")
    if job_ids:
        _each(queue, job_ids, url, prefix, as_json, "retry")
        return
    with open_queue(queue, url, prefix) as q:
        require_queue(q)
        count = q.retry_failed()
    emit(as_json, {"retried": count}, lambda: f"retried {count} failed job(s)")


def _pause_command(pause: bool) -> click.Command:
    verb = "pause" if pause else "resume"

    @click.command(verb)
    @click.argument("queue")
    @click.option("--group", default=None, help=f"{verb.title()} one group only.")
    @url_option
    @prefix_option
    def command(queue: str, group: str | None, url: str | None, prefix: str) -> None:
        with open_queue(queue, url, prefix) as q:
            require_queue(q)
            if group is None:
                (q.pause if pause else q.resume)()
            else:
                (q.pause_group if pause else q.resume_group)(group)
        click.echo(f"{verb}d {queue}" + (f" group {group}" if group else ""))

    command.help = (
        "Stop claims on QUEUE (or one --group); running jobs finish."
        if pause
        else "Let claims on QUEUE (or one --group) start again."
    )
    return command


pause = _pause_command(True)
resume = _pause_command(False)


@click.command()
@click.argument("queue")
@queue_options
def schedules(queue: str, url: str | None, prefix: str, as_json: bool) -> None:
    """The repeatable jobs of QUEUE, soonest first."""
    with open_queue(queue, url, prefix) as q:
        found = q.schedules()
    rows = [{"id": s.id, "task": s.task, "cron": s.cron, "every": s.every,
             "next_run": s.next_run, "job_id": s.job_id, "data": s.data} for s in found]
    emit(as_json, rows, lambda: table(
        ["schedule", "task", "timing", "next run", "pending job"],
        [[s.id, s.task, f"cron {s.cron}" if s.cron else f"every {s.every:g} s",
          when(s.next_run), s.job_id] for s in found],
    ) if found else f"no schedules on {queue}")  # fmt: skip


@click.command()
@click.argument("queue")
@click.argument("state", type=click.Choice([s.value for s in PURGEABLE]))
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@queue_options
def purge(
    queue: str, state: str, yes: bool, url: str | None, prefix: str, as_json: bool
) -> None:
    """Delete every job of QUEUE in STATE (waiting covers every group)."""
    with open_queue(queue, url, prefix) as q:
        seen = require_queue(q)
        count = seen.counts[JobState(state)]
        if not yes:
            click.confirm(f"delete the {count} {state} job(s) of {queue}?", abort=True)
        removed = q.purge(state)
    emit(as_json, {"removed": removed}, lambda: f"removed {removed} {state} job(s)")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8800, show_default=True)
@click.option("-q", "--queue", "names", multiple=True, help="Queues to show (default: all).")
@click.option("--read-only", is_flag=True, help="No actions.")
@click.option("--token", envvar="CONVEYOR_DASHBOARD_TOKEN", help="Require this token.")
@click.option("--basic", envvar="CONVEYOR_DASHBOARD_BASIC", help="Require user:password.")
@url_option
@prefix_option
def dashboard(
    host: str, port: int, names: tuple[str, ...], read_only: bool, token: str | None,
    basic: str | None, url: str | None, prefix: str,
) -> None:  # fmt: skip
    """Serve the web dashboard (binds 127.0.0.1 unless --host says otherwise)."""
    try:
        import uvicorn

        from conveyor.integrations.web import DashboardSettings, dashboard_app
    except ImportError as exc:
        raise click.ClickException(f"{exc}: pip install 'conveyor[web]'") from exc
    with resolved_url(url) as found:
        settings = DashboardSettings(
            url=found, queues=names, prefix=prefix, read_only=read_only, token=token, basic=basic
        )
        click.echo(f"dashboard on http://{host}:{port}/ (Ctrl-C stops it)", err=True)
        uvicorn.run(dashboard_app(settings), host=host, port=port, log_level="warning")


COMMANDS = [queues, jobs, retry, cancel, remove, promote, pause, resume, schedules, purge,
            dashboard, archive, report]  # fmt: skip

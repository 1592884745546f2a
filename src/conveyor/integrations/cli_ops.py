"""The operator's commands: queues, jobs, retry, cancel, remove, promote,
pause / resume, schedules, purge and the dashboard. Tables for people,
`--json` for scripts."""

from __future__ import annotations

import sys
from typing import Any

import click

from conveyor.client.inspect import PURGEABLE, Limits, QueueOverview, group_waiting
from conveyor.client.sync import Queue
from conveyor.errors import (
    JobNotFoundError,
    MigrationRefusedError,
    NotASuspectError,
    ProtocolVersionError,
)
from conveyor.integrations.cli_audit import note
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

LISTED = [s.value for s in JobState]
COUNTED = ("waiting", "delayed", "active", "completed", "failed", "blocked", "waiting_children")


def _limits(value: Limits) -> str:
    parts = [] if value.concurrency is None else [f"{value.concurrency} at once"]
    if value.rate is not None:
        parts.append(f"{value.rate} per {value.per:g} s")
    return ", ".join(parts) or "none"


def group_total(seen: QueueOverview, group: str) -> int:
    """The waiting jobs of `group`; a group the queue does not know is an error."""
    found = group_waiting(seen, group)
    if found is None:
        raise click.ClickException(f"no group {group!r} in queue {seen.name!r}")
    return found


def _overview_json(seen: QueueOverview, workers: int) -> dict[str, Any]:
    return {
        "queue": seen.name,
        "exists": seen.exists,
        "protocol_version": seen.protocol_version,
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
                rows += _lane_rows(q)
    emit(as_json, rows, lambda: table(
        ["queue", "version", *COUNTED, "workers", "paused"],
        [[r["queue"], r["protocol_version"] or "", *(r["counts"][s] for s in COUNTED), r["workers"],
          "paused" if r["paused"] else ""] for r in rows],
    ) if rows else "no queues registered on this server")  # fmt: skip


def _lane_rows(queue: Queue) -> list[dict[str, Any]]:
    """The queue's failure lane as `<name>:failures`, when it has jobs or workers."""
    lane = queue.failure_lane()
    seen, workers = lane.overview(), len(lane.workers())
    if not (seen.exists or any(seen.counts.values()) or workers):
        return []
    return [{**_overview_json(seen, workers), "queue": f"{queue.name}:failures"}]


def _job_json(job: Job) -> dict[str, Any]:
    return {
        "id": job.id, "queue": job.queue, "state": job.state.value, "task": job.task,
        "data": job.data, "priority": job.priority, "attempts": job.attempts,
        "failures": job.failures, "stalls": job.stalls, "progress": job.progress,
        "result": job.result, "error": job.error, "worker": job.worker, "group": job.group,
        "created_at": job.created_at, "run_at": job.run_at, "started_at": job.started_at,
        "finished_at": job.finished_at, "suspect": job.suspect, "trace_id": job.trace_id,
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
        total = seen.counts[JobState(state)] if group is None else group_total(seen, group)
        ids = q.job_ids(state, group=group, offset=offset, limit=limit, reverse=newest_first)
        found = [j for j in q.get_many(ids, blocked=state == "blocked") if j is not None]
    rows = [_job_json(j) for j in found]
    emit(as_json, rows, lambda: "\n".join([
        table(["id", "task", "priority", "attempts", "group", "created", "run at", "finished",
               "suspect"],
              [[j.id, j.task, j.priority, j.attempts, j.group, when(j.created_at),
                when(j.run_at), when(j.finished_at), "suspect" if j.suspect else ""]
               for j in found]),
        f"{offset + 1 if found else 0}-{offset + len(found)} of {total} {state}",
    ]))  # fmt: skip


def _each(queue: str, ids: tuple[str, ...], url: str | None, prefix: str, as_json: bool,
          act: str) -> None:  # fmt: skip
    """Apply one job control to each id; exit 1 when any was not applied."""
    outcomes: dict[str, str] = {}
    with open_queue(queue, url, prefix) as q:
        for job_id in ids:
            if act == "remove":
                outcomes[job_id] = q.remove(job_id)
            elif act in SUSPECT_ACTS:
                outcomes[job_id] = _on_suspect(q, act, job_id)
            else:
                done = {"retry": q.retry, "cancel": q.cancel, "promote": q.promote}[act](job_id)
                outcomes[job_id] = "done" if done else _why_not(q, job_id, act)
        note(", ".join(f"{i}: {o}" for i, o in outcomes.items()))
    emit(as_json, outcomes, lambda: "\n".join(f"{i}: {o}" for i, o in outcomes.items()))
    applied = ("done", "removed", "released", "failed", "aborting")
    if any(o not in applied for o in outcomes.values()):
        sys.exit(1)


# The state a job must be in for each control to apply.
_NEEDS = {"retry": "failed", "cancel": "waiting or delayed", "promote": "delayed"}


def _why_not(queue: Queue, job_id: str, act: str) -> str:
    """Why a control was not applied, in the words of the job's state."""
    job = queue.get(job_id)
    if job is None:
        return "not applied: no such job"
    return f"not applied: it is {job.state.value}, not {_NEEDS[act]}"


SUSPECT_ACTS = ("release-suspect", "fail-suspect")


def _on_suspect(q: Queue, act: str, job_id: str) -> str:
    """An operator's word on a suspect (Queue.release_suspect / fail_suspect)."""
    try:
        if act == "release-suspect":
            q.release_suspect(job_id)
            return "released"
        return q.fail_suspect(job_id)
    except (NotASuspectError, JobNotFoundError) as exc:
        return f"not applied: {exc}"


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
release_suspect = _control(
    "release-suspect",
    "Let suspects of QUEUE (jobs whose worker died with them) run as any job again.",
)
fail_suspect = _control(
    "fail-suspect", "Fail suspects of QUEUE for good (a running one is aborted)."
)


@click.command()
@click.argument("queue")
@click.argument("job_ids", nargs=-1)
@click.option("--all-failed", is_flag=True, help="Retry every failed job of QUEUE.")
@queue_options
def retry(
    queue: str, job_ids: tuple[str, ...], all_failed: bool,
    url: str | None, prefix: str, as_json: bool,
) -> None:  # fmt: skip
    """Run failed jobs of QUEUE again (JOB_IDS, or --all-failed). A flow parent
    that failed because a child failed runs again at once, without that
    child's result (the child stays failed: retry it first if the parent needs it)."""
    if all_failed == bool(job_ids):
        raise click.UsageError("give job ids or --all-failed (not both)")
    if job_ids:
        _each(queue, job_ids, url, prefix, as_json, "retry")
        return
    with open_queue(queue, url, prefix) as q:
        require_queue(q)
        count = q.retry_failed()
        note(f"retried {count} failed job(s)")
    emit(as_json, {"retried": count}, lambda: f"retried {count} failed job(s)")


def _pause_command(pause: bool) -> click.Command:
    verb = "pause" if pause else "resume"

    @click.command(verb)
    @click.argument("queue")
    @click.option("--group", default=None, help=f"{verb.title()} one group only.")
    @queue_options
    def command(queue: str, group: str | None, url: str | None, prefix: str, as_json: bool) -> None:
        with open_queue(queue, url, prefix) as q:
            seen = require_queue(q)
            if group is None:
                (q.pause if pause else q.resume)()
            else:
                known = group_waiting(seen, group) is not None or group in q.groups()
                (q.pause_group if pause else q.resume_group)(group)
        note = "" if group is None or known else f" (no job of group {group!r} waits or runs)"
        payload = {"queue": queue, "group": group, verb + "d": True, "note": note.strip(" ()")}
        emit(as_json, payload, lambda: f"{verb}d {queue}" + (f" group {group}" if group else "")
             + note)  # fmt: skip

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
    rows = [
        {
            "id": s.id,
            "task": s.task,
            "cron": s.cron,
            "every": s.every,
            "next_run": s.next_run,
            "job_id": s.job_id,
            "data": s.data,
        }
        for s in found
    ]
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
def purge(queue: str, state: str, yes: bool, url: str | None, prefix: str, as_json: bool) -> None:
    """Delete every job of QUEUE in STATE (waiting covers every group)."""
    with open_queue(queue, url, prefix) as q:
        seen = require_queue(q)
        count = seen.counts[JobState(state)]
        if not yes:
            click.confirm(f"delete the {count} {state} job(s) of {queue}?", abort=True)
        removed = q.purge(state)
        note(f"removed {removed} {state} job(s)")
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


@click.command()
@click.argument("queue")
@click.option(
    "--force",
    is_flag=True,
    help="Migrate even while workers answer the roll call (they are known dead).",
)
@click.option(
    "--batch",
    type=click.IntRange(1, 10_000),
    default=100,
    show_default=True,
    help="Groups converted per script call.",
)
@queue_options
def migrate(
    queue: str, force: bool, batch: int, url: str | None, prefix: str, as_json: bool
) -> None:
    """Upgrade QUEUE in place from the previous protocol version; stop its old
    workers first. Idempotent: a queue already current is left as it is."""
    with open_queue(queue, url, prefix) as q:
        try:
            done = q.migrate(force=force, batch=batch)
        except (MigrationRefusedError, ProtocolVersionError) as exc:
            raise click.ClickException(str(exc)) from exc
    counts = {state.value: n for state, n in done.counts.items()}
    out = {
        "queue": done.queue,
        "found": done.found,
        "version": done.version,
        "migrated": done.migrated,
        "rate_windows": done.rate_windows,
        "groups": done.groups,
        "calls": done.calls,
        "counts": counts,
    }
    emit(as_json, out, lambda: (
        f"queue {queue!r}: protocol {done.found} -> {done.version}, "
        f"{done.rate_windows} rate window(s) carried over, {done.groups} group(s) looked at"
        if done.migrated else f"queue {queue!r} already speaks protocol {done.version}"
    ) + "; jobs: " + ", ".join(f"{k} {v}" for k, v in counts.items()))  # fmt: skip


COMMANDS = [queues, jobs, migrate, retry, cancel, remove, promote, release_suspect, fail_suspect,
            pause, resume, schedules, purge, dashboard, archive, report]  # fmt: skip

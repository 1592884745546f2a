"""`conveyor jobs show`: one job as operators read it — its record, its runs
from the record itself, its blocked twin, its recent events (progress
collapsed). JSON with ISO dates for scripts."""

from __future__ import annotations

from typing import Any

import click

from conveyor.client import history
from conveyor.client.events import Event
from conveyor.integrations.cli_ops import _job_json
from conveyor.integrations.cli_options import emit, open_queue, queue_options, shown, when
from conveyor.job import Job


def _run_json(run: history.Run) -> dict[str, Any]:
    return {
        "attempt": run.attempt, "started_at": run.started_at, "ended_at": run.ended_at,
        "worker": run.worker, "outcome": run.outcome, "error": run.error,
    }  # fmt: skip


@click.command("show")
@click.argument("queue")
@click.argument("job_id")
@queue_options
def show_job(queue: str, job_id: str, url: str | None, prefix: str, as_json: bool) -> None:
    """One job: its record, its runs, its blocked twin, its recent events."""
    with open_queue(queue, url, prefix) as q:
        job = q.get(job_id)
        if job is None:
            raise click.ClickException(f"no job {job_id!r} in queue {queue!r}")
        twin = q.get_blocked(job_id)
        events = history.collapsed(q.job_events(job_id))
    runs = history.runs(job)
    payload = {
        **_job_json(job),
        "runs": [_run_json(r) for r in runs],
        "runs_not_kept": history.runs_not_kept(job),
        "blocked_twin": None if twin is None else _job_json(twin),
        "events": [{"at": e.at, "event": e.name, **e.fields} for e in events],
    }
    emit(as_json, payload, lambda: _text(job, runs, twin, events))


def _text(job: Job, runs: list[history.Run], twin: Job | None, events: list[Event]) -> str:
    fields = _job_json(job)
    if job.state.value not in ("active", "completed", "failed"):  # a dead run's is not the job's
        fields["progress"] = None
    lines = [f"{k:>12}: {shown(v)}" for k, v in fields.items() if k != "error"]
    if job.error:
        lines += ["", "last error:", job.error]
    lines += ["", "runs:"]
    lines += [_run_line(r) for r in runs] or ["  not run yet"]
    if history.runs_not_kept(job):
        lines.append(f"  ({history.runs_not_kept(job)} earlier run(s) not kept)")
    if twin is not None:
        lines += ["", "next run (blocked twin):"]
        lines += [f"{k:>12}: {shown(v)}" for k, v in _job_json(twin).items() if v is not None]
    lines += ["", "recent events:"] + [event_line(e) for e in events]
    return "\n".join(lines)


def _run_line(run: history.Run) -> str:
    error = (run.error or "").strip()
    parts = [
        f"#{run.attempt}", run.outcome, f"started {when(run.started_at)}",
        f"ended {when(run.ended_at)}", f"worker {run.worker or '-'}",
        f"error: {error.splitlines()[-1]}" if error else "",
    ]  # fmt: skip
    return "  " + "  ".join(p for p in parts if p)


def event_line(event: Event) -> str:
    """One event on a line; an error by its last line (a traceback's message)."""
    fields = " ".join(f"{k}={v}" for k, v in event.fields.items() if k != "error")
    error = (event.fields.get("error") or "").strip()
    message = f"error: {error.splitlines()[-1]}" if error else ""
    parts = [when(event.at), event.name, fields, message]
    return "  " + "  ".join(p for p in parts if p)

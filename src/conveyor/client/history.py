"""A job's history as operators read it: its runs from the record itself (the
attempt history of docs/protocol.md §16.1 and the latest run), which stays
as long as the record does, and its recent events with progress collapsed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from conveyor.client.events import Event
from conveyor.job import Job, JobState

# What the latest run's record says about how that run ended, by the job's state.
_LATEST = {
    JobState.ACTIVE: "running",
    JobState.COMPLETED: "completed",
    JobState.FAILED: "failed",
}


@dataclass(frozen=True, slots=True)
class Run:
    """One run (attempt) of a job: `outcome` is running, completed, failed,
    stalled, or `ended` when the record no longer says how (a run that ended
    without a failure kept: released, say)."""

    attempt: int
    started_at: datetime | None
    ended_at: datetime | None
    worker: str | None
    outcome: str
    error: str | None


def runs(job: Job) -> list[Run]:
    """The job's runs that its record describes, oldest first: each failed or
    stalled one it kept (the last 10), and the latest run."""
    found = [Run(e.attempt, e.started_at, e.at, e.worker, e.kind, e.error) for e in job.errors]
    kept = {r.attempt for r in found}
    if job.attempts and job.attempts not in kept:
        outcome = _LATEST.get(job.state, "ended")
        ended = None if job.state is JobState.ACTIVE else job.finished_at
        error = job.error if job.state is JobState.FAILED else None
        found.append(Run(job.attempts, job.started_at, ended, job.worker, outcome, error))
    return found


def runs_not_kept(job: Job) -> int:
    """Earlier runs the record no longer describes (it keeps the last 10 errors)."""
    described = {e.attempt for e in job.errors} | ({job.attempts} if job.attempts else set())
    return max(0, job.attempts - len(described))


def collapsed(events: Sequence[Event]) -> list[Event]:
    """The events with every `progress` but the latest left out: the lifecycle
    stays readable however often a job reports progress."""
    last = max((i for i, e in enumerate(events) if e.name == "progress"), default=-1)
    return [e for i, e in enumerate(events) if e.name != "progress" or i == last]

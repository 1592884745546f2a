"""The worker runtime: wait, claim, run, heartbeat, acknowledge, recover, stop."""

from conveyor.worker.context import JobContext, WaitingForChildren, current_job, running
from conveyor.worker.job_lines import JobLogHandler
from conveyor.worker.runtime import Worker, WorkerSettings

__all__ = [
    "JobContext",
    "JobLogHandler",
    "WaitingForChildren",
    "Worker",
    "WorkerSettings",
    "current_job",
    "running",
]

"""The worker runtime: wait, claim, run, heartbeat, acknowledge, recover, stop."""

from conveyor.worker.context import JobContext, current_job, running
from conveyor.worker.runtime import Worker, WorkerSettings

__all__ = ["JobContext", "Worker", "WorkerSettings", "current_job", "running"]

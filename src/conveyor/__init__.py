"""Conveyor: a Redis-backed distributed job queue with a written protocol."""

from conveyor.client import AsyncQueue, Enqueued, JobRequest, Queue, QueueSettings, WorkerInfo
from conveyor.client.events import Event
from conveyor.client.tasks import Task, Tasks
from conveyor.errors import ConveyorError, PermanentError, RateLimited, ResumeLater
from conveyor.job import AttemptError, Job, JobState
from conveyor.options import JobDefaults

__all__ = [
    "AsyncQueue",
    "AttemptError",
    "ConveyorError",
    "Enqueued",
    "Event",
    "Job",
    "JobDefaults",
    "JobRequest",
    "JobState",
    "PermanentError",
    "Queue",
    "QueueSettings",
    "RateLimited",
    "ResumeLater",
    "Task",
    "Tasks",
    "WorkerInfo",
]
__version__ = "0.1.0"

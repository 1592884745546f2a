"""Conveyor: a Redis-backed distributed job queue with a written protocol."""

from importlib.metadata import PackageNotFoundError, version

from conveyor.client import AsyncQueue, Enqueued, JobRequest, Queue, QueueSettings, WorkerInfo
from conveyor.client.events import Event
from conveyor.client.flows import ChildrenCounts, ChildrenResults, FlowEnqueued, FlowJob, FlowNode
from conveyor.client.pipelines import Step
from conveyor.client.tasks import Task, Tasks
from conveyor.errors import ConveyorError, PermanentError, RateLimited, ResumeLater
from conveyor.hooks import Hook, RunningJob
from conveyor.job import AttemptError, Job, JobState
from conveyor.options import JobDefaults

__all__ = [
    "AsyncQueue",
    "AttemptError",
    "ChildrenCounts",
    "ChildrenResults",
    "ConveyorError",
    "Enqueued",
    "Event",
    "FlowEnqueued",
    "FlowJob",
    "FlowNode",
    "Hook",
    "Job",
    "JobDefaults",
    "JobRequest",
    "JobState",
    "PermanentError",
    "Queue",
    "QueueSettings",
    "RateLimited",
    "ResumeLater",
    "RunningJob",
    "Step",
    "Task",
    "Tasks",
    "WorkerInfo",
]
try:  # one source: the version pyproject.toml gave the installed package
    __version__ = version("conveyor")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

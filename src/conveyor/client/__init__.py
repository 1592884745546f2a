"""Producers and inspection: one I/O-free core with a sync and an async shell."""

from conveyor.client.aio import AsyncQueue
from conveyor.client.models import Enqueued, EnqueueOptions, JobRequest, QueueSettings, WorkerInfo
from conveyor.client.sync import Queue

__all__ = [
    "AsyncQueue",
    "EnqueueOptions",
    "Enqueued",
    "JobRequest",
    "Queue",
    "QueueSettings",
    "WorkerInfo",
]

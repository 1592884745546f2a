"""Conveyor, the system under test: its worker module and its enqueue calls.

The worker runs through Conveyor's own CLI with leases, heartbeats and events
on, as always (there is no switch to turn them off), at the CLI's default
concurrency (10) or, in the `*_c100` scenarios, at 100:

    conveyor worker bench.conveyor_adapter:tasks --url URL [--concurrency 100]
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bench.mark import mark
from bench.systems import at_defaults, concurrency
from conveyor import AsyncQueue, JobRequest, Queue
from conveyor.client.tasks import Tasks

NAME = "conveyor"
DISTRIBUTION = "conveyor"
API = "sync"  # enqueue_single uses Queue; enqueue_single_async uses AsyncQueue
PER_JOB_STATE = True
BULK = "Queue.enqueue_many"
QUEUE = "bench"
CLI_DEFAULT = 100  # `conveyor worker`: 100 for async handlers (10 with a sync one)
CONCURRENCY = concurrency(CLI_DEFAULT)
SETTINGS = (
    f"`conveyor worker` at concurrency {CONCURRENCY} (async handler; lease 30 s, "
    "heartbeat every 10 s, events stream capped at 10,000: the defaults)"
)
# The `completed` events of the queue's stream tell when a job's outcome is in Redis.
COMPLETION_STREAM = ("conveyor:{bench}:events", b"event", b"completed", b"id")

URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
tasks = Tasks(QUEUE, url=URL)


@tasks.task
async def noop(arg: Any) -> None:
    mark(arg)


def worker_command(python: str) -> list[str]:
    conveyor = str(Path(python).parent / "conveyor")
    cmd = [conveyor, "worker", "bench.conveyor_adapter:tasks", "--url", URL]
    return cmd if at_defaults() else [*cmd, "--concurrency", str(CONCURRENCY)]


class Client:
    def __init__(self, url: str) -> None:
        self.queue = Queue(QUEUE, url=url)
        self.aqueue = AsyncQueue(QUEUE, url=url)

    async def open(self) -> None:
        self.queue.check()
        await self.aqueue.check()

    def enqueue(self, arg: Any) -> str:
        return self.queue.enqueue("noop", arg).id

    async def aenqueue(self, arg: Any) -> str:
        return (await self.aqueue.enqueue("noop", arg)).id

    def bulk(self, args: list[Any]) -> None:
        self.queue.enqueue_many([JobRequest("noop", a) for a in args])

    async def close(self) -> None:
        self.queue.close()
        await self.aqueue.close()

"""Taskiq with taskiq-redis's RedisStreamBroker (consumer groups, acks: the recommended one),
`taskiq worker --workers 1` with its default --max-async-tasks 100 (the same in `*_c100`).
The row `taskiq@0.12` runs this module with taskiq 0.12 and taskiq-redis 1.0."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from taskiq_redis import RedisStreamBroker

from bench.mark import mark
from bench.systems import concurrency

NAME = "taskiq"
DISTRIBUTION = "taskiq"
API = "async"
PER_JOB_STATE = False  # the message in a stream; no job status without a result backend
BULK = None
MAX_ASYNC_TASKS = concurrency(100)
SETTINGS = (
    f"`taskiq worker --workers 1 --max-async-tasks {MAX_ASYNC_TASKS} --log-level WARNING` "
    "(RedisStreamBroker; 100 is the default)"
)
COMPLETION_STREAM = None

broker = RedisStreamBroker(
    url=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"), queue_name="bench"
)


@broker.task(task_name="noop")
async def noop(arg: Any) -> None:
    mark(arg)


def worker_command(python: str) -> list[str]:
    cli = str(Path(python).parent / "taskiq")
    return [cli, "worker", "bench.peers.taskiq_peer:broker", "--workers", "1",
            "--max-async-tasks", str(MAX_ASYNC_TASKS), "--log-level", "WARNING"]  # fmt: skip


class Client:
    def __init__(self, url: str) -> None:
        self.broker = broker

    async def open(self) -> None:
        await self.broker.startup()

    async def after_flush(self) -> None:
        # Producers call broker.startup(), which creates the consumer group at the
        # stream's end ("$"): recreate it after the harness flushed the server, or
        # a worker started later would skip the jobs already queued.
        await self.broker.startup()

    async def enqueue(self, arg: Any) -> str:
        return str((await noop.kiq(arg)).task_id)

    async def close(self) -> None:
        await self.broker.shutdown()

"""streaQ (Redis streams, typed, async): its `Worker` at concurrency 16 (its default) or 100
in `*_c100`, run by `python -m bench.peers.streaq_peer` with logging at WARNING (its CLI,
`streaq run`, logs two INFO lines per task); bulk through `Worker.enqueue_many`.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from streaq import Worker

from bench.mark import mark
from bench.systems import concurrency

NAME = "streaq"
DISTRIBUTION = "streaq"
API = "async"
PER_JOB_STATE = True  # a task key per job (its data and status) besides the stream entry
BULK = "Worker.enqueue_many"
CONCURRENCY = concurrency(16)
SETTINGS = f"`Worker(concurrency={CONCURRENCY}).run_sync()` (16 is the default), log level WARNING"
COMPLETION_STREAM = None
URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")

worker = Worker(redis_url=URL, queue_name="bench", concurrency=CONCURRENCY)


@worker.task
async def noop(arg: Any) -> None:
    mark(arg)


def worker_command(python: str) -> list[str]:
    return [python, "-m", "bench.peers.streaq_peer"]


class Client:
    def __init__(self, url: str) -> None:
        self.worker = worker  # a producer is a Worker entered as a context manager

    async def open(self) -> None:
        await self.worker.__aenter__()

    async def enqueue(self, arg: Any) -> str:
        return str((await noop.enqueue(arg)).id)

    async def bulk(self, args: list[Any]) -> None:
        for i in range(0, len(args), 1000):
            await self.worker.enqueue_many([noop.enqueue(a) for a in args[i : i + 1000]])

    async def close(self) -> None:
        await self.worker.__aexit__(None, None, None)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    worker.run_sync()

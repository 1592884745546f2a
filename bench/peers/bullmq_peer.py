"""The BullMQ Python port: `Worker(concurrency=1)` (its default) or 100 in `*_c100`, job
options at their defaults (completed jobs kept), bulk through `Queue.addBulk`.

Run as `python -m bench.peers.bullmq_peer`: the port has no CLI.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

from bullmq import Queue, Worker

from bench.mark import mark
from bench.systems import concurrency

NAME = "bullmq"
DISTRIBUTION = "bullmq"
API = "async"
PER_JOB_STATE = True  # a job hash, kept when completed
BULK = "Queue.addBulk"
CONCURRENCY = concurrency(1)
SETTINGS = (
    f"`Worker('bench', fn, {{'concurrency': {CONCURRENCY}}})` in its own process (the port "
    "has no CLI; 1 is the default); defaults otherwise"
)
# BullMQ's events stream has a `completed` event per job, like Conveyor's.
COMPLETION_STREAM = ("bull:bench:events", b"event", b"completed", b"jobId")
URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")


async def process(job: Any, token: str) -> None:
    mark(job.data)


def worker_command(python: str) -> list[str]:
    return [python, "-m", "bench.peers.bullmq_peer"]


class Client:
    def __init__(self, url: str) -> None:
        self.queue = Queue("bench", {"connection": url})

    async def open(self) -> None:
        await self.queue.client.ping()

    async def enqueue(self, arg: Any) -> str:
        return str((await self.queue.add("noop", arg)).id)

    async def bulk(self, args: list[Any]) -> None:
        for i in range(0, len(args), 1000):
            await self.queue.addBulk([{"name": "noop", "data": a} for a in args[i : i + 1000]])

    async def close(self) -> None:
        await self.queue.close()


async def _work() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    worker = Worker("bench", process, {"connection": URL, "concurrency": CONCURRENCY})
    await stop.wait()
    await worker.close()


if __name__ == "__main__":
    asyncio.run(_work())

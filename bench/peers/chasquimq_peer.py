"""ChasquiMQ (a Rust engine with Python bindings): its `Worker` at concurrency 100 (its
default, so the same in `*_c100`), run by `python -m bench.peers.chasquimq_peer`; bulk
through `Queue.add_bulk`. It needs Redis 8: on Redis 7.0 the first enqueue fails with
`ERR Invalid stream ID specified as stream command argument`, and the row keeps that error
(pass a Redis 8 binary with `--redis-server` to measure it).
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

from chasquimq import Job, Queue, Worker

from bench.mark import mark
from bench.systems import concurrency

NAME = "chasquimq"
DISTRIBUTION = "chasquimq"
API = "async"
PER_JOB_STATE = False  # the message in a stream; results not stored by default
BULK = "Queue.add_bulk"
CONCURRENCY = concurrency(100)
SETTINGS = f"`Worker('bench', fn, concurrency={CONCURRENCY})` in its own process (the default)"
COMPLETION_STREAM = None
URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")


async def process(job: Job) -> None:
    mark(job.data)


def worker_command(python: str) -> list[str]:
    return [python, "-m", "bench.peers.chasquimq_peer"]


class Client:
    def __init__(self, url: str) -> None:
        self.url = url

    async def open(self) -> None:
        self.queue = Queue("bench", redis_url=self.url)

    async def enqueue(self, arg: Any) -> str:
        return str((await self.queue.add("noop", arg)).id)

    async def bulk(self, args: list[Any]) -> None:
        for i in range(0, len(args), 1000):
            await self.queue.add_bulk([{"name": "noop", "data": a} for a in args[i : i + 1000]])

    async def close(self) -> None:
        await self.queue.close()


async def _work() -> None:
    worker = Worker("bench", process, redis_url=URL, concurrency=CONCURRENCY)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: asyncio.ensure_future(worker.close()))
    await worker.run()


if __name__ == "__main__":
    asyncio.run(_work())

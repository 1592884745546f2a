"""SAQ: `saq bench.peers.saq_peer.settings --quiet`, concurrency 10 (its default) or 100."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from saq import Queue

from bench.mark import mark
from bench.systems import concurrency

NAME = "saq"
DISTRIBUTION = "saq"
API = "async"
PER_JOB_STATE = True  # a job key with status
BULK = None  # `map` waits for the results
CONCURRENCY = concurrency(10)
SETTINGS = f"`saq ... --quiet`: concurrency {CONCURRENCY} (10 is the default), Redis queue"
COMPLETION_STREAM = None
URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")

queue = Queue.from_url(URL, name="bench")


async def noop(ctx: Any, *, arg: Any) -> None:
    mark(arg)


settings = {"queue": queue, "functions": [noop], "concurrency": CONCURRENCY}


def worker_command(python: str) -> list[str]:
    cli = str(Path(python).parent / "saq")
    return [cli, "bench.peers.saq_peer.settings", "--quiet"]


class Client:
    def __init__(self, url: str) -> None:
        self.queue = Queue.from_url(url, name="bench")

    async def open(self) -> None:
        await self.queue.connect()

    async def enqueue(self, arg: Any) -> str | None:
        job = await self.queue.enqueue("noop", arg=arg)
        return None if job is None else job.key

    async def close(self) -> None:
        await self.queue.disconnect()

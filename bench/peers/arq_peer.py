"""arq: `run_worker` with its defaults (max_jobs=10, or 100 in `*_c100`; poll_delay=0.5 s),
per-job logging off.

Run as `python -m bench.peers.arq_peer` (arq's documented `run_worker`), so the
log level can be set: arq's CLI logs every job at INFO.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from arq import create_pool
from arq.connections import RedisSettings

from bench.mark import mark
from bench.systems import concurrency

NAME = "arq"
DISTRIBUTION = "arq"
API = "async"
PER_JOB_STATE = True  # a job key, an in-progress key, a result key (kept 1 h)
BULK = None
MAX_JOBS = concurrency(10)
SETTINGS = (
    f"`run_worker(WorkerSettings)`: max_jobs={MAX_JOBS}, poll_delay=0.5 s (the default), "
    "log level WARNING"
)
COMPLETION_STREAM = None
URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")


async def noop(ctx: dict[str, Any], arg: Any) -> None:
    mark(arg)


class WorkerSettings:
    functions = [noop]
    redis_settings = RedisSettings.from_dsn(URL)
    max_jobs = MAX_JOBS


def worker_command(python: str) -> list[str]:
    return [python, "-m", "bench.peers.arq_peer"]


class Client:
    def __init__(self, url: str) -> None:
        self.url = url

    async def open(self) -> None:
        self.pool = await create_pool(RedisSettings.from_dsn(self.url))

    async def enqueue(self, arg: Any) -> str | None:
        job = await self.pool.enqueue_job("noop", arg)
        return None if job is None else job.job_id

    async def close(self) -> None:
        await self.pool.aclose()


if __name__ == "__main__":
    from arq import run_worker

    logging.basicConfig(level=logging.WARNING)
    asyncio.set_event_loop(asyncio.new_event_loop())
    run_worker(WorkerSettings)  # type: ignore[arg-type]

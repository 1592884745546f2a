"""RQ: `rq worker -w rq.worker.SimpleWorker` (jobs in the worker process; rq's default forks
a child per job and does about 50 jobs/s here), bulk through `Queue.enqueue_many`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from redis import Redis
from rq import Queue

from bench.mark import mark

NAME = "rq"
DISTRIBUTION = "rq"
API = "sync"
PER_JOB_STATE = True  # a job hash with status, registries
BULK = "Queue.enqueue_many"
SETTINGS = "`rq worker -w rq.worker.SimpleWorker --quiet` (results kept 500 s, the default)"
COMPLETION_STREAM = None
URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")


def noop(arg: Any) -> None:
    mark(arg)


def worker_command(python: str) -> list[str]:
    cli = str(Path(python).parent / "rq")
    return [cli, "worker", "-w", "rq.worker.SimpleWorker", "--quiet", "--url", URL, "bench"]


class Client:
    def __init__(self, url: str) -> None:
        self.redis = Redis.from_url(url)
        self.queue = Queue("bench", connection=self.redis)

    def open(self) -> None:
        self.redis.ping()

    def enqueue(self, arg: Any) -> str:
        return str(self.queue.enqueue(noop, arg).id)

    def bulk(self, args: list[Any]) -> None:
        for i in range(0, len(args), 1000):
            chunk = args[i : i + 1000]
            self.queue.enqueue_many([Queue.prepare_data(noop, (a,)) for a in chunk])

    def close(self) -> None:
        self.redis.close()

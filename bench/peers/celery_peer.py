"""Celery 5 with the Redis broker: thread pool of 8, results ignored, no gossip/mingle/heartbeat."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from celery import Celery

from bench.mark import mark

NAME = "celery"
DISTRIBUTION = "celery"
API = "sync"
PER_JOB_STATE = False  # kombu: the message in a list (plus an unacked hash while running)
BULK = None  # `group` sends message by message
SETTINGS = (
    "`celery worker -P threads -c 8 --without-gossip --without-mingle --without-heartbeat "
    "-l warning` (task_ignore_result=True; acks after receipt, the default)"
)
COMPLETION_STREAM = None

app = Celery("bench", broker=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="noop")
def noop(arg: Any) -> None:
    mark(arg)


def worker_command(python: str) -> list[str]:
    cli = str(Path(python).parent / "celery")
    return [
        cli, "-A", "bench.peers.celery_peer", "worker", "-P", "threads", "-c", "8",
        "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "warning",
    ]  # fmt: skip


class Client:
    def __init__(self, url: str) -> None:
        self.app = app

    def open(self) -> None:
        with self.app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=3)

    def enqueue(self, arg: Any) -> str:
        return str(noop.delay(arg).id)

    def close(self) -> None:
        pass

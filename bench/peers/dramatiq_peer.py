"""Dramatiq: RedisBroker, `dramatiq --processes 1 --threads 8` (its default thread count)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from bench.mark import mark

NAME = "dramatiq"
DISTRIBUTION = "dramatiq"
API = "sync"
PER_JOB_STATE = False  # the message in a hash plus its id in a list; no job status
BULK = None  # `group` enqueues message by message
SETTINGS = "`dramatiq --processes 1 --threads 8` (RedisBroker, acks via its Lua dispatch script)"
COMPLETION_STREAM = None

broker = RedisBroker(url=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="bench")
def noop(arg: Any) -> None:
    mark(arg)


def worker_command(python: str) -> list[str]:
    cli = str(Path(python).parent / "dramatiq")
    return [cli, "bench.peers.dramatiq_peer", "--processes", "1", "--threads", "8"]


class Client:
    def __init__(self, url: str) -> None:
        self.broker = broker

    def open(self) -> None:
        self.broker.client.ping()

    def enqueue(self, arg: Any) -> str:
        return str(noop.send(arg).message_id)

    def close(self) -> None:
        pass

"""huey: RedisHuey (BRPOP), the thread consumer with 8 workers, quiet logging. The row
`huey@redis5` runs this module on redis-py 5.3 (its fastest install measured here)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from huey import RedisHuey

from bench.mark import mark

NAME = "huey"
DISTRIBUTION = "huey"
API = "sync"
PER_JOB_STATE = False  # one LPUSH of the message; no record of the job
BULK = None  # huey has no bulk enqueue
SETTINGS = "`huey_consumer -k thread -w 8 -q` (RedisHuey, blocking BRPOP; no acknowledgement)"
COMPLETION_STREAM = None

huey = RedisHuey("bench", url=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))


@huey.task()
def noop(arg: Any) -> None:
    mark(arg)


def worker_command(python: str) -> list[str]:
    consumer = str(Path(python).parent / "huey_consumer")
    return [consumer, "bench.peers.huey_peer.huey", "-k", "thread", "-w", "8", "-q"]


class Client:
    def __init__(self, url: str) -> None:
        self.huey = huey

    def open(self) -> None:
        self.huey.storage.conn.ping()

    def enqueue(self, arg: Any) -> None:
        noop(arg)

    def close(self) -> None:
        pass

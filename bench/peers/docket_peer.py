"""docket (`pydocket`): `docket worker --concurrency 10` (its default) or 100 in `*_c100`,
logging at WARNING (its default INFO logs every task). At concurrency 100 the URL carries
`?max_connections=`: docket's workers need a connection per task in flight.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from docket import Docket

from bench.mark import mark
from bench.systems import at_defaults, concurrency

NAME = "docket"
DISTRIBUTION = "pydocket"
API = "async"
PER_JOB_STATE = True  # an execution record per task (its state, kept 15 min) and the stream
BULK = None
CONCURRENCY = concurrency(10)
BASE_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
URL = BASE_URL if at_defaults() else f"{BASE_URL}?max_connections={2 * CONCURRENCY + 20}"
SETTINGS = (
    f"`docket worker --concurrency {CONCURRENCY} --logging-level WARNING` (10 is the default)"
    + ("" if at_defaults() else f"; URL `?max_connections={2 * CONCURRENCY + 20}`")
)
COMPLETION_STREAM = None
DOCKET = "bench"


async def noop(arg: Any) -> None:
    mark(arg)


tasks = [noop]


def worker_command(python: str) -> list[str]:
    cli = str(Path(python).parent / "docket")
    return [
        cli, "worker", "--tasks", "bench.peers.docket_peer:tasks", "--docket", DOCKET,
        "--url", URL, "--concurrency", str(CONCURRENCY), "--logging-level", "WARNING",
    ]  # fmt: skip


class Client:
    def __init__(self, url: str) -> None:
        self.docket = Docket(name=DOCKET, url=url)

    async def open(self) -> None:
        await self.docket.__aenter__()
        self.docket.register(noop)

    async def enqueue(self, arg: Any) -> str:
        return str((await self.docket.add(noop)(arg)).key)

    async def close(self) -> None:
        await self.docket.__aexit__(None, None, None)

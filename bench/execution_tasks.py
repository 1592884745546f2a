"""The jobs of `python -m bench.execution`, for Conveyor and the peers.

`cpu_job()` is about 5 ms of pure Python (its loop count is calibrated by the
bench and given in BENCH_CPU_LOOPS); every job calls bench.mark.mark(), as in
the rest of the bench. Importing this module in the peers' venv defines only
what that venv can import.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from bench.mark import mark

LOOPS = int(os.environ.get("BENCH_CPU_LOOPS", "40000"))
URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")


def cpu_job(loops: int = LOOPS) -> int:
    n = 0
    for i in range(loops):
        n += i * i % 7
    return n


try:  # Conveyor (its own venv)
    from conveyor.client.tasks import Tasks

    tasks = Tasks("bench-exec", url=URL)

    @tasks.task(executor="process", max_failures=1)
    def cpu(arg: Any) -> None:
        cpu_job()
        mark(arg)

    @tasks.task(executor="process", max_failures=1)
    def hangs(arg: Any) -> None:
        mark(arg)
        time.sleep(600)  # until its timeout terminates the child

    @tasks.task
    async def io(arg: Any) -> None:
        await asyncio.sleep(0.05)
        mark(arg)

except ImportError:
    pass

try:  # Celery (the peers' venv)
    from celery import Celery

    app = Celery("bench-exec", broker=URL)
    app.conf.update(task_ignore_result=True, broker_connection_retry_on_startup=True)

    @app.task(name="cpu")
    def celery_cpu(arg: Any) -> None:
        cpu_job()
        mark(arg)

except ImportError:
    pass

try:  # Dramatiq (the peers' venv)
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    dramatiq.set_broker(RedisBroker(url=URL))

    @dramatiq.actor(queue_name="bench-exec", max_retries=0)
    def dramatiq_cpu(arg: Any) -> None:
        cpu_job()
        mark(arg)

except ImportError:
    pass

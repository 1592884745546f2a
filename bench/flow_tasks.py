"""The tasks of bench/flows.py: `conveyor worker bench.flow_tasks:tasks --burst`."""

from __future__ import annotations

import os
from typing import Any

from conveyor.client.tasks import Tasks

tasks = Tasks(os.environ.get("BENCH_FLOW_QUEUE", "flows"), url=os.environ["BENCH_REDIS_URL"])


@tasks.task
async def noop(data: Any) -> None:
    return None

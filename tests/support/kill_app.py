"""Tasks for worker processes that tests kill or stop (queue from $TEST_QUEUE)."""

from __future__ import annotations

import os
import time
from typing import Any

from conveyor.client.tasks import Tasks

tasks = Tasks(os.environ.get("TEST_QUEUE", "default"))


@tasks.task
def sleepy(data: dict[str, Any]) -> dict[str, Any]:
    """Sleeps, then reports which process finished it."""
    started = os.environ.get("TEST_MARK")
    if started:
        with open(started, "a") as mark:
            mark.write(f"{os.getpid()}\n")
    time.sleep(float(data["seconds"]))
    return {"pid": os.getpid()}

"""Tasks of the truth test's mix (queue from $TEST_QUEUE): fast, retried once,
failing for good, slow (the run a killed worker leaves), and a flow's parts."""

from __future__ import annotations

import os
import time
from typing import Any

from conveyor import PermanentError
from conveyor.client.tasks import Tasks
from conveyor.worker import current_job

tasks = Tasks(os.environ.get("TEST_QUEUE", "default"))


@tasks.task
def ok(data: int) -> int:
    return data


@tasks.task(max_failures=2, min_backoff=0.01, max_backoff=0.01)
def flaky(data: int) -> int:
    if current_job().attempt == 1:
        raise ValueError(f"flaky {data}: first attempt")
    return data


@tasks.task
def doomed(data: int) -> None:
    raise PermanentError(f"doomed {data}")


@tasks.task
def sleepy(data: dict[str, Any]) -> int:
    with open(os.environ["TEST_MARK"], "a") as mark:
        mark.write(f"{os.getpid()}\n")
    time.sleep(float(data["seconds"]))
    return os.getpid()


@tasks.task
def report(data: None) -> None:
    pass


@tasks.task(max_failures=1)
def part(data: str) -> str:
    if data == "bad":
        raise ValueError("bad part")
    return data

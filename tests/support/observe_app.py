"""Tasks for the logging, metrics and tracing tests' worker processes (queue
from $TEST_QUEUE)."""

from __future__ import annotations

import logging
import os
from typing import Any

from conveyor.client.tasks import Tasks
from conveyor.errors import PermanentError
from conveyor.worker import current_job

tasks = Tasks(os.environ.get("TEST_QUEUE", "default"))
log = logging.getLogger("observe_app")


@tasks.task
async def chatty(data: Any) -> Any:
    """Writes to its own log and to the process's log, then returns data."""
    current_job().log("first line", "second line")
    log.info("chatty says hello")
    return data


@tasks.task
def chatty_sync(data: Any) -> Any:
    current_job().log(f"sync line {data}")
    return data


@tasks.task
async def broken(data: Any) -> None:
    raise PermanentError(f"broken on purpose: {data}")

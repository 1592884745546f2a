"""Tasks for the logging, metrics and tracing tests' worker processes (queue
from $TEST_QUEUE)."""

from __future__ import annotations

import logging
import os
from typing import Any

from conveyor.client.tasks import Tasks
from conveyor.errors import PermanentError
from conveyor.worker import JobLogHandler, current_job

tasks = Tasks(os.environ.get("TEST_QUEUE", "default"))
log = logging.getLogger("observe_app")
# the records of this logger logged while a job runs go to the job's own log too
joblog = logging.getLogger("observe_app.joblog")
joblog.addHandler(JobLogHandler())
joblog.setLevel(logging.INFO)
joblog.info("logged outside any job: in no job's log")


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


@tasks.task
async def logged(data: Any) -> Any:
    joblog.info("step %d of 2", 1)
    joblog.warning("step %d of 2", 2)
    return data

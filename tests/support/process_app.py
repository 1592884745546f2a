"""Handlers that run in child processes (process execution). Tests copy
`tasks.handlers` into a Tasks of their own queue: a child finds a handler
again by its module and name, in this module's `tasks`."""

from __future__ import annotations

import ctypes
import os
import signal
import time
from typing import Any

from conveyor.client.tasks import Tasks
from conveyor.errors import PermanentError
from conveyor.worker import current_job

tasks = Tasks("process-app")


@tasks.task(executor="process")
def cpu(n: int) -> dict[str, int]:
    """Pure-Python work, and the process that did it."""
    return {"sum": sum(i * i for i in range(n)), "pid": os.getpid()}


@tasks.task(executor="process")
def whoami(data: Any) -> dict[str, Any]:
    job = current_job()
    job.progress(1, 2)
    return {"pid": os.getpid(), "id": job.id, "attempt": job.attempt, "data": data}


@tasks.task(executor="process")
async def async_whoami(data: Any) -> int:
    return os.getpid()


@tasks.task(executor="process", max_failures=3, min_backoff=0, max_backoff=0)
def dies_once(how: str) -> int:
    """Dies on its first attempt, the way `how` says; then succeeds."""
    if current_job().attempt == 1:
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif how == "exit":
            os._exit(3)
        elif how == "segfault":
            ctypes.string_at(0)
    return os.getpid()


@tasks.task(executor="process", max_failures=1)
def sleeps(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


@tasks.task(executor="process", max_failures=1)
def eats(mib: int) -> int:
    """Takes `mib` MiB of resident memory for a moment."""
    block = bytearray(mib << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    return os.getpid()


@tasks.task(executor="process", max_failures=5)
def raises(kind: str) -> None:
    if kind == "permanent":
        raise PermanentError("no use trying again")
    raise ValueError(f"bad value {kind!r}")


@tasks.task
def plain(data: Any) -> int:
    """No executor of its own: a thread, or a child with executor='process'."""
    return os.getpid()


@tasks.task(executor="process", max_failures=2, min_backoff=0, max_backoff=0)
def reports(data: Any) -> Any:
    """Logs, saves a checkpoint and fails on its first attempt; the retry sees it."""
    job = current_job()
    job.log(f"attempt {job.attempt}", "in a child")
    if job.attempt == 1:
        job.save_checkpoint({"step": 1})
        raise RuntimeError("after the checkpoint")
    return job.checkpoint


@tasks.task(executor="process", max_failures=1)
def touches(path: str) -> int:
    """Leaves its pid in a file: the proof that it ran."""
    with open(path, "a") as mark:
        mark.write(f"{os.getpid()}\n")
    return os.getpid()


@tasks.task
async def nap(seconds: float) -> dict[str, Any]:
    """An async handler (on the event loop, unless it runs as a suspect: in a child)."""
    import asyncio

    started = time.time()
    await asyncio.sleep(seconds)
    return {"pid": os.getpid(), "started": started, "ended": time.time()}

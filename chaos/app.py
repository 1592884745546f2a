"""The tasks chaos workers run: ``conveyor worker chaos.app:tasks``.

Configured by environment variables (set by the harness):

    CHAOS_QUEUE          queue name (default "chaos")
    CHAOS_LEDGER         ledger file every handler writes its start and finish to
    CHAOS_SCRATCH        a directory for "has this job run before?" markers
    CHAOS_EVENTS_MAXLEN  events stream length (large, so the checker can count completions)
    CHAOS_EVICTION       eviction_check of the queue settings (error | warn | ignore)
    CHAOS_MIN_REPLICAS   min_replicas of the queue settings (outcomes WAIT for replicas)

A job's data says what its handler does (every key optional):

    s          sleep this many seconds
    first      on the job's first run only, sleep this instead of ``s`` (a marker file says)
    cpu        burn this many seconds of pure-Python CPU
    die        SIGKILL the worker process right after the start entry (a poison job)
    die_after  the same, this many seconds into the run
    fail       raise while the attempt number is below this
    retry_in   on the first attempt raise with ``retry_at = time.time() + retry_in``
               (the worker's own, possibly skewed, clock)
    result_kb  return a result of about this many KiB
    hold_mb    (work_process) take this many MiB of resident memory for a moment
    eat_mb     allocate (and touch) memory, 8 MiB every 20 ms, up to this many MiB, expecting
               to be killed for it on the way (scenario 22's OOM killer); at the cap it
               raises, so a kill that never came shows as a failure
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

from chaos.ledger import Ledger
from conveyor.client.models import QueueSettings
from conveyor.client.tasks import Tasks
from conveyor.worker import current_job

QUEUE = os.environ.get("CHAOS_QUEUE", "chaos")
_SETTINGS = QueueSettings(
    events_maxlen=int(os.environ.get("CHAOS_EVENTS_MAXLEN", "2000000")),
    eviction_check=os.environ.get("CHAOS_EVICTION", "error"),  # type: ignore[arg-type]
    min_replicas=int(os.environ.get("CHAOS_MIN_REPLICAS", "0")),
    replica_timeout=2.0,
)
tasks = Tasks(QUEUE, url=os.environ.get("CHAOS_URL") or None, settings=_SETTINGS)

_ledger: Ledger | None = None


def ledger() -> Ledger:
    global _ledger
    if _ledger is None:
        _ledger = Ledger(os.environ["CHAOS_LEDGER"])
    return _ledger


class RetryLater(Exception):
    def __init__(self, retry_at: float) -> None:
        super().__init__(f"retry at {retry_at:.3f} (worker clock)")
        self.retry_at = retry_at


def _first_run(job_id: str) -> bool:
    """True the first time any worker asks for this job (an O_EXCL marker file)."""
    scratch = os.environ.get("CHAOS_SCRATCH")
    if not scratch:
        return True
    marker = Path(scratch) / job_id.encode().hex()
    try:
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return False
    return True


def _burn(seconds: float) -> int:
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        for i in range(2000):
            n += i * i % 7
    return n


def _plan(data: Any) -> tuple[dict[str, Any], float]:
    """The job's spec and how long to sleep on this run."""
    spec = data if isinstance(data, dict) else {}
    job = current_job()
    ledger().record("start", job.id, job.attempt)
    if spec.get("die"):
        _die()
    if spec.get("retry_in") and job.attempt == 1:
        raise RetryLater(time.time() + float(spec["retry_in"]))
    if job.attempt < int(spec.get("fail", 0)):
        raise RuntimeError(f"planned failure on attempt {job.attempt}")
    sleep = float(spec.get("s", 0))
    if "first" in spec and _first_run(job.id):
        sleep = float(spec["first"])
    return spec, sleep


def _finish(spec: dict[str, Any]) -> dict[str, Any]:
    job = current_job()
    ledger().record("finish", job.id, job.attempt)
    result: dict[str, Any] = {"pid": os.getpid(), "attempt": job.attempt}
    if spec.get("result_kb"):
        result["pad"] = "x" * (int(spec["result_kb"]) * 1024)
    return result


def _eat(cap_mb: int) -> None:
    """Hold ever more touched memory (b"x" * n writes every page) until killed."""
    held: list[bytes] = []
    for _ in range(cap_mb // 8):
        held.append(b"x" * (8 << 20))
        time.sleep(0.02)
    raise MemoryError(f"ate {cap_mb} MiB and nobody killed the worker")


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@tasks.task
async def work(data: Any) -> dict[str, Any]:
    spec, sleep = _plan(data)
    if spec.get("die_after"):
        await asyncio.sleep(float(spec["die_after"]))
        _die()
    if spec.get("cpu"):
        _burn(float(spec["cpu"]))  # on the event loop: blocks it on purpose
    if spec.get("eat_mb"):
        await asyncio.to_thread(_eat, int(spec["eat_mb"]))
    if sleep:
        await asyncio.sleep(sleep)
    return _finish(spec)


@tasks.task
def work_sync(data: Any) -> dict[str, Any]:
    spec, sleep = _plan(data)
    if spec.get("die_after"):
        time.sleep(float(spec["die_after"]))
        _die()
    if spec.get("cpu"):
        _burn(float(spec["cpu"]))
    if sleep:
        time.sleep(sleep)
    return _finish(spec)


@tasks.task(executor="process")
def work_process(data: Any) -> dict[str, Any]:
    """work_sync in a child process of the worker (process execution)."""
    spec, sleep = _plan(data)
    if spec.get("hold_mb"):
        block = bytearray(int(spec["hold_mb"]) << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        del block
    if spec.get("cpu"):
        _burn(float(spec["cpu"]))
    if sleep:
        time.sleep(sleep)
    return _finish(spec)


@tasks.task
async def noop(data: Any) -> None:
    """The soak's job: one ledger entry, nothing else."""
    ledger().record("finish", current_job().id, current_job().attempt)

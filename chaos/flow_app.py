"""The tasks of the flow scenarios: ``conveyor worker chaos.flow_app:tasks``.

Configured as chaos.app is (CHAOS_QUEUE, CHAOS_URL, CHAOS_LEDGER, CHAOS_EVENTS_MAXLEN). A child
sleeps its data's `s` seconds and returns its `n`; a parent reads its children's results and
returns how many it saw and their sum, so the checker can tell whether it ran with all of them.
For the endings scenario: `boom` sleeps `s` seconds and fails, and `fan_in` returns how many of
its children completed, were ignored and failed.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from chaos.ledger import Ledger
from conveyor.client.models import QueueSettings
from conveyor.client.tasks import Tasks
from conveyor.worker import current_job

QUEUE = os.environ.get("CHAOS_QUEUE", "flows")
_SETTINGS = QueueSettings(events_maxlen=int(os.environ.get("CHAOS_EVENTS_MAXLEN", "2000000")))
tasks = Tasks(QUEUE, url=os.environ.get("CHAOS_URL") or None, settings=_SETTINGS)
_ledger: Ledger | None = None


def ledger() -> Ledger:
    global _ledger
    if _ledger is None:
        _ledger = Ledger(os.environ["CHAOS_LEDGER"])
    return _ledger


@tasks.task
async def child(data: dict[str, Any]) -> int:
    job = current_job()
    ledger().record("start", job.id, job.attempt)
    await asyncio.sleep(float(data.get("s", 0)))
    ledger().record("finish", job.id, job.attempt)
    return int(data["n"])


@tasks.task
async def parent(data: Any) -> dict[str, int]:
    job = current_job()
    ledger().record("start", job.id, job.attempt)
    children = await job.children_async()
    seen = {"children": len(children.results), "sum": sum(children.results.values())}
    ledger().record("finish", job.id, job.attempt, f"{seen['children']}:{seen['sum']}")
    return seen


@tasks.task
async def boom(data: dict[str, Any]) -> None:
    job = current_job()
    ledger().record("start", job.id, job.attempt)
    await asyncio.sleep(float(data.get("s", 0)))
    ledger().record("fail", job.id, job.attempt)
    raise RuntimeError("boom")


@tasks.task
async def fan_in(data: Any) -> dict[str, int]:
    job = current_job()
    ledger().record("start", job.id, job.attempt)
    children = await job.children_async()
    seen = {"results": len(children.results), "ignored": len(children.ignored),
            "failed": len(children.failed)}  # fmt: skip
    ledger().record("finish", job.id, job.attempt, f"{seen['results']}:{seen['ignored']}")
    return seen

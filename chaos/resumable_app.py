"""The resumable job of chaos scenario 20: ``conveyor worker chaos.resumable_app:tasks``.

`iterate` sums the items 0 .. items-1 in batches, saving its position and
its running sum as the job's checkpoint after each batch (a sync handler:
each save is written before it goes on). A run starts from the checkpoint
the last run saved, so a worker killed mid-run costs at most the batch in
hand. Ledger entries: `resume` (extra = the position the run starts at) and
`saved` (extra = the position just saved). Environment as chaos/app.py.
"""

from __future__ import annotations

import os
import time
from typing import Any

from chaos.ledger import Ledger
from conveyor.client.models import QueueSettings
from conveyor.client.tasks import Tasks
from conveyor.worker import current_job

tasks = Tasks(
    os.environ.get("CHAOS_QUEUE", "chaos"),
    url=os.environ.get("CHAOS_URL") or None,
    settings=QueueSettings(events_maxlen=int(os.environ.get("CHAOS_EVENTS_MAXLEN", "100000"))),
)
_ledger: Ledger | None = None


def ledger() -> Ledger:
    global _ledger
    if _ledger is None:
        _ledger = Ledger(os.environ["CHAOS_LEDGER"])
    return _ledger


@tasks.task
def iterate(data: dict[str, Any]) -> dict[str, int]:
    items, batch, pause = int(data["items"]), int(data["batch"]), float(data["pause"])
    job = current_job()
    state = job.checkpoint or {"next": 0, "sum": 0}
    ledger().record("resume", job.id, job.attempt, state["next"])
    while state["next"] < items:
        start = state["next"]
        end = min(start + batch, items)
        time.sleep(pause)  # the work of a batch
        state = {"next": end, "sum": state["sum"] + sum(range(start, end))}
        job.save_checkpoint(state)
        ledger().record("saved", job.id, job.attempt, end)
    return state

"""The demo's tasks (queue from $CONVEYOR_DEMO_QUEUE): mostly quick async
jobs, some sync ones, a few that fail once and a few that always fail."""

from __future__ import annotations

import hashlib
import os
from typing import Any

from conveyor.client.tasks import Tasks
from conveyor.errors import PermanentError
from conveyor.worker.context import current_job

tasks = Tasks(os.environ.get("CONVEYOR_DEMO_QUEUE", "demo"))


@tasks.task
async def thumbnail(data: dict[str, Any]) -> dict[str, Any]:
    """Pretend to make a thumbnail: a hash stands in for the work."""
    digest = hashlib.blake2b(str(data["image"]).encode(), digest_size=8).hexdigest()
    return {"image": data["image"], "thumb": digest}


@tasks.task(min_backoff=0.05, max_backoff=0.2)
def checksum(data: dict[str, Any]) -> str:
    """A sync handler (runs in the worker's thread pool); fails its first try
    when asked to, so the demo shows retries."""
    if data.get("flaky") and current_job().attempt == 1:
        raise ConnectionError("transient upstream error (retried)")
    return hashlib.sha256(str(data["image"]).encode()).hexdigest()[:16]


@tasks.task
async def corrupt(data: dict[str, Any]) -> None:
    """Always fails for good, so the demo shows failures."""
    raise PermanentError(f"image {data['image']} is corrupt")

"""Three queues in one app, for a worker that serves several:
``conveyor worker chaos.multi_app:a --queues multi-a,multi-b,multi-c``.

The one task, ``work``, is chaos.app's (the same job data, the same ledger); the queue names
are ``<CHAOS_MULTI>-a`` ... (default ``multi``).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from chaos import app
from conveyor.client.tasks import Tasks

BASE = os.environ.get("CHAOS_MULTI", "multi")
QUEUES = tuple(f"{BASE}-{x}" for x in "abc")
_URL = os.environ.get("CHAOS_URL") or None
a, b, c = (Tasks(name, url=_URL, settings=app._SETTINGS) for name in QUEUES)


async def work(data: Any) -> dict[str, Any]:
    spec, sleep = app._plan(data)
    if sleep:
        await asyncio.sleep(sleep)
    return app._finish(spec)


for _tasks in (a, b, c):
    _tasks.task(work)

"""The Busy page (live workers: busy slots, memory, CPU, quiet / stop, and the
jobs each runs) and the audit trail page."""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from conveyor.client.operators import AUDIT_READ
from conveyor.integrations.web.pages import LISTED, existing, render
from conveyor.job import Job, JobState

BUSY_SHOWN = 500  # running jobs read at most (soonest lease deadline first)


async def busy_page(request: Request) -> Response:
    queue, seen = await existing(request)
    workers = sorted(await queue.workers(), key=lambda w: str(w.info.get("host", "")))
    ids = await queue.job_ids(JobState.ACTIVE, limit=BUSY_SHOWN)
    running = [j for j in await queue.get_many(ids) if j is not None]
    now = time.time()
    by_worker: dict[str, list[dict[str, Any]]] = {}
    for job in running:
        by_worker.setdefault(job.worker or "", []).append(_running(job, now))
    return render(
        request, "workers.html", queue=seen, workers=workers, by_worker=by_worker,
        running=len(running), shown=BUSY_SHOWN, states=LISTED,
    )  # fmt: skip


def _running(job: Job, now: float) -> dict[str, Any]:
    started = job.started_at
    return {"job": job, "for": None if started is None else max(0.0, now - started.timestamp())}


async def audit_page(request: Request) -> Response:
    queue, seen = await existing(request)
    entries = await queue.audit(count=AUDIT_READ)
    return render(request, "audit.html", queue=seen, entries=entries, states=LISTED)


def routes() -> list[Route]:
    return [
        Route("/queues/{name}/workers", busy_page, name="workers"),
        Route("/queues/{name}/audit", audit_page, name="audit"),
    ]

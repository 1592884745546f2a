"""The dashboard's pages: queues, one queue, jobs by state, search, a job,
workers, schedules. Every read goes through the public client API."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlencode

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from conveyor.client import history
from conveyor.client.aio import AsyncQueue
from conveyor.client.inspect import QueueOverview, group_waiting
from conveyor.errors import ValidationError
from conveyor.integrations.web import flash, lists, ops
from conveyor.integrations.web.access import csrf_token, remember_csrf
from conveyor.integrations.web.ops import LANE
from conveyor.job import FINISHED_STATES as FINISHED
from conveyor.job import Job, JobState
from conveyor.protocol.flows import split_reference

# The states listed page by page, in the order of a job's life.
LISTED = (
    JobState.WAITING, JobState.DELAYED, JobState.ACTIVE, JobState.COMPLETED, JobState.FAILED,
    JobState.BLOCKED, JobState.WAITING_CHILDREN,
)  # fmt: skip


def render(request: Request, template: str, **context: Any) -> Response:
    settings = request.app.state.settings
    shown = flash.read(request)
    context.update(
        read_only=settings.read_only, csrf=csrf_token(request), flash=shown,
        draft=shown.form if shown is not None else {},
    )  # fmt: skip
    response: Response = request.app.state.templates.TemplateResponse(request, template, context)
    remember_csrf(request, response)
    flash.forget(request, response)
    return response


async def queue_of(request: Request) -> AsyncQueue:
    """The queue of the path; 404 for one the dashboard does not show."""
    try:
        queue: AsyncQueue = await request.app.state.queues.open(request.path_params["name"])
    except (LookupError, ValidationError) as exc:
        raise HTTPException(404, str(exc)) from exc
    return queue


async def existing(request: Request) -> tuple[AsyncQueue, QueueOverview]:
    """The queue of the path and its overview."""
    queue = await queue_of(request)
    return queue, ops.named(queue, await queue.overview())


def idle_with_work(seen: QueueOverview, workers: int) -> bool:
    """Jobs wait or run but no worker answers the roll call."""
    busy = seen.counts[JobState.WAITING] + seen.counts[JobState.ACTIVE]
    return busy > 0 and workers == 0 and not seen.paused


async def index(request: Request) -> Response:
    names = await request.app.state.queues.names()
    shown = request.app.state.queues
    rows = await asyncio.gather(*(_row(shown.get(n)) for n in [*names, *(n + LANE for n in names)]))
    return render(request, "queues.html", rows=[r for r in rows if r], states=LISTED)


async def _row(queue: AsyncQueue) -> dict[str, Any] | None:
    """A queue's row of the overview; None for a failure lane with nothing in it."""
    seen, workers = await asyncio.gather(queue.overview(), queue.workers())
    if queue.core.failures and not (seen.exists or any(seen.counts.values()) or workers):
        return None
    return {
        "overview": ops.named(queue, seen), "workers": len(workers),
        "warning": idle_with_work(seen, len(workers)),
        "pace": await ops.pace(queue, seen, len(workers)),
    }  # fmt: skip


async def queue_page(request: Request) -> Response:
    queue, seen = await existing(request)
    chosen = ops.chart_range(request)
    minutes, width, unit = ops.RANGES[chosen]
    workers, history, timings = await asyncio.gather(
        queue.workers(), queue.metrics_history(minutes=minutes),
        queue.task_timings(hours=max(1, minutes // 60)),
    )  # fmt: skip
    points = {**ops.bucketed(history, width), "unit": unit}
    return render(
        request, "queue.html", queue=seen, workers=len(workers), states=LISTED,
        suspects=[(s, w.id) for w in workers for s in w.info.get("suspects", ())],
        warning=idle_with_work(seen, len(workers)), history=points, timings=timings,
        totals={k: sum(v) for k, v in points.items() if k not in ("t", "unit")},
        pace=await ops.pace(queue, seen, len(workers)), range=chosen, ranges=ops.RANGES,
    )  # fmt: skip


async def jobs_page(request: Request) -> Response:
    queue, seen = await existing(request)
    try:
        state = JobState(request.path_params["state"])
        if state not in LISTED:
            raise ValueError(state)
    except ValueError as exc:
        wanted = request.path_params["state"]
        raise HTTPException(404, f"no list of jobs in state {wanted!r}") from exc
    group = request.query_params.get("group") or None
    page = max(1, _int(request.query_params.get("page"), 1))
    size = request.app.state.settings.page_size
    wanted = lists.Filter.of(request)
    if wanted.any:
        found = await lists.filtered(queue, state, group, wanted, page, size)
        return render(
            request, "jobs.html", queue=seen, state=state, group=group, page=page, size=size,
            total=found.total, rows=found.rows, states=LISTED, wanted=wanted, found=found,
        )  # fmt: skip
    try:
        ids = await queue.job_ids(
            state, group=group, offset=(page - 1) * size, limit=size, reverse=state in FINISHED
        )
    except ValidationError as exc:
        raise HTTPException(400, str(exc)) from exc
    total = seen.counts[state] if group is None else (group_waiting(seen, group) or 0)
    jobs = await queue.get_many(ids, blocked=state is JobState.BLOCKED)
    return render(
        request, "jobs.html", queue=seen, state=state, group=group, page=page, size=size,
        total=total, rows=list(zip(ids, jobs, strict=True)), states=LISTED, wanted=wanted,
        found=None,
    )  # fmt: skip


async def search(request: Request) -> Response:
    queue, seen = await existing(request)
    params = request.query_params
    job_id, field, value = params.get("id", ""), params.get("field", ""), params.get("value", "")
    message, found = None, []
    try:
        if job_id:
            if await queue.get(job_id) is not None:
                target = (
                    request.url_for("job", name=queue.name).path + "?" + urlencode({"id": job_id})
                )
                return RedirectResponse(target, status_code=303)
            message = f"no job {job_id!r} in {queue.name!r}"
        elif field and value:
            found = await queue.find(field, value, limit=request.app.state.settings.page_size)
            message = None if found else f"no job indexed {field}={value!r}"
    except ValidationError as exc:
        message = str(exc)
    return render(
        request, "search.html", queue=seen, job_id=job_id, field=field, value=value,
        rows=[(j.id, j) for j in found], message=message, states=LISTED,
    )  # fmt: skip


async def job_page(request: Request) -> Response:
    queue, seen = await existing(request)
    job_id = request.query_params.get("id", "")
    try:
        job, twin = await asyncio.gather(queue.get(job_id), queue.get_blocked(job_id))
        if job is None and twin is not None:  # the twin is about to become the job
            job = await queue.get(job_id)
        events = await queue.job_events(job_id) if job is not None else []
        log = await queue.job_log(job_id) if job is not None else []
    except ValidationError as exc:
        raise HTTPException(404, str(exc)) from exc
    if job is None:
        raise HTTPException(404, f"no job {job_id!r} in {queue.name!r} (finished jobs expire)")
    flow = await _flow(request, queue, job)
    return render(
        request, "job.html", queue=seen, job=job, events=history.collapsed(events), log=log,
        states=LISTED, flow=flow, twin=twin, runs=history.runs(job),
        runs_not_kept=history.runs_not_kept(job),
    )  # fmt: skip


async def _flow(request: Request, queue: AsyncQueue, job: Job) -> dict[str, Any] | None:
    """A flow node's parent, child counts and one page of children (docs/protocol.md §14)."""
    if job.parent is None and not job.children:
        return None
    page = max(1, _int(request.query_params.get("children"), 1))
    size = request.app.state.settings.page_size
    node = await queue.flow(job.id, offset=(page - 1) * size, limit=size)
    parent = split_reference(job.parent) if job.parent else None
    children = [(split_reference(c.ref), c) for c in node.children]
    return {"node": node, "parent": parent, "children": children, "page": page, "size": size}


async def schedules_page(request: Request) -> Response:
    queue, seen = await existing(request)
    schedules = await queue.schedules()
    editing = next((s for s in schedules if s.id == request.query_params.get("edit")), None)
    return render(
        request, "schedules.html", queue=seen, schedules=schedules, editing=editing,
        states=LISTED,
    )  # fmt: skip


def _int(text: str | None, default: int) -> int:
    try:
        return int(text or default)
    except ValueError:
        return default


def routes() -> list[Route]:
    return [
        Route("/", index, name="index"),
        Route("/queues/{name}", queue_page, name="queue"),
        Route("/queues/{name}/jobs/{state}", jobs_page, name="jobs"),
        Route("/queues/{name}/search", search, name="search"),
        Route("/queues/{name}/job", job_page, name="job"),
        Route("/queues/{name}/schedules", schedules_page, name="schedules"),
    ]

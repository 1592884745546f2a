"""The dashboard's actions: each a POST with the CSRF token, confirmed in the
page first (htmx `hx-confirm`), refused in read-only mode."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qsl, urlencode

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from conveyor.client.aio import AsyncQueue
from conveyor.errors import ConveyorError
from conveyor.integrations.web.access import csrf_ok
from conveyor.integrations.web.pages import queue_of

Action = Callable[[AsyncQueue, FormData], Awaitable[str]]


async def _retry(queue: AsyncQueue, form: FormData) -> str:
    job_id = _field(form, "id")
    return f"retried {job_id}" if await queue.retry(job_id) else f"{job_id} is not failed"


async def _cancel(queue: AsyncQueue, form: FormData) -> str:
    job_id = _field(form, "id")
    done = await queue.cancel(job_id)
    return f"cancelled {job_id}" if done else f"{job_id} is not waiting or delayed"


async def _abort(queue: AsyncQueue, form: FormData) -> str:
    job_id = _field(form, "id")
    outcome = await queue.abort(job_id)
    return {
        "aborting": f"aborting {job_id}: its worker stops it",
        "cancelled": f"cancelled {job_id}",
        "finished": f"{job_id} has already finished",
    }.get(outcome, f"{job_id}: {outcome}")


async def _promote(queue: AsyncQueue, form: FormData) -> str:
    job_id = _field(form, "id")
    return f"promoted {job_id}" if await queue.promote(job_id) else f"{job_id} is not delayed"


async def _remove(queue: AsyncQueue, form: FormData) -> str:
    job_id = _field(form, "id")
    outcome = await queue.remove(job_id)
    return {"removed": f"removed {job_id}", "active": f"{job_id} is running: not removed"}.get(
        outcome, f"no job {job_id}"
    )


async def _priority(queue: AsyncQueue, form: FormData) -> str:
    job_id, text = _field(form, "id"), _field(form, "priority")
    priority: int | str = int(text) if text.isdigit() else text
    done = await queue.set_priority(job_id, priority)
    return f"{job_id}: priority {text}" if done else f"{job_id} is not waiting or delayed"


async def _retry_failed(queue: AsyncQueue, form: FormData) -> str:
    return f"retried {await queue.retry_failed()} failed job(s)"


async def _pause(queue: AsyncQueue, form: FormData) -> str:
    await queue.pause()
    return f"paused {queue.name}"


async def _resume(queue: AsyncQueue, form: FormData) -> str:
    await queue.resume()
    return f"resumed {queue.name}"


async def _pause_group(queue: AsyncQueue, form: FormData) -> str:
    group = _field(form, "group")
    await queue.pause_group(group)
    return f"paused group {group}"


async def _resume_group(queue: AsyncQueue, form: FormData) -> str:
    group = _field(form, "group")
    await queue.resume_group(group)
    return f"resumed group {group}"


async def _schedule(queue: AsyncQueue, form: FormData) -> str:
    """Add or replace a schedule: id, task, JSON data, and cron or every (seconds)."""
    schedule_id, task = _field(form, "schedule"), _field(form, "task")
    try:
        data = json.loads(str(form.get("data") or "null"))
    except json.JSONDecodeError as exc:
        raise HTTPException(400, f"data is not JSON: {exc}") from exc
    cron, every = str(form.get("cron") or "").strip(), str(form.get("every") or "").strip()
    try:
        interval = float(every) if every else None
    except ValueError as exc:
        raise HTTPException(400, f"every is not a number of seconds: {every!r}") from exc
    await queue.schedule(schedule_id, task, data, cron=cron or None, every=interval)
    return f"scheduled {schedule_id}"


async def _unschedule(queue: AsyncQueue, form: FormData) -> str:
    schedule_id = _field(form, "schedule")
    done = await queue.unschedule(schedule_id)
    return f"removed schedule {schedule_id}" if done else f"no schedule {schedule_id}"


ACTIONS: dict[str, Action] = {
    "retry": _retry, "cancel": _cancel, "abort": _abort, "promote": _promote, "remove": _remove,
    "priority": _priority, "retry_failed": _retry_failed, "pause": _pause, "resume": _resume,
    "pause_group": _pause_group, "resume_group": _resume_group, "schedule": _schedule,
    "unschedule": _unschedule,
}  # fmt: skip


def _field(form: FormData, name: str) -> str:
    value = str(form.get(name) or "").strip()
    if not value:
        raise HTTPException(400, f"missing form field {name!r}")
    return value


def _back(request: Request, form: FormData) -> str:
    """Where to go after the action: a path of this site only (no open redirect)."""
    back = str(form.get("back") or "")
    if not back.startswith("/") or back.startswith("//"):
        back = str(request.url_for("queue", name=request.path_params["name"]).path)
    return back


async def act(request: Request) -> Response:
    if request.app.state.settings.read_only:
        raise HTTPException(403, "the dashboard is read-only")
    form = await request.form()
    if not csrf_ok(request, str(form.get("csrf") or "")):
        raise HTTPException(403, "the form's CSRF token does not match: reload the page")
    action = ACTIONS.get(request.path_params["action"])
    if action is None:
        raise HTTPException(404, f"no action {request.path_params['action']!r}")
    try:
        message = await action(await queue_of(request), form)
    except ConveyorError as exc:
        message = f"refused: {exc}"
    path, _, query = _back(request, form).partition("?")
    kept = [(k, v) for k, v in parse_qsl(query) if k != "done"]
    target = path + "?" + urlencode([*kept, ("done", message)])
    if request.headers.get("hx-request"):
        return Response(headers={"HX-Redirect": target})
    return RedirectResponse(target, status_code=303)


def routes() -> list[Route]:
    return [Route("/queues/{name}/do/{action}", act, methods=["POST"], name="act")]

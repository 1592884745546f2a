"""The dashboard's actions: each a POST with the CSRF token, confirmed in the
page first (htmx `hx-confirm`), refused in read-only mode."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from conveyor.client.aio import AsyncQueue
from conveyor.errors import ConveyorError
from conveyor.integrations.web import flash, ops
from conveyor.integrations.web.access import csrf_ok
from conveyor.integrations.web.pages import queue_of

log = logging.getLogger("conveyor.web")
Action = Callable[[AsyncQueue, FormData], Awaitable[str]]


class Refused(Exception):  # noqa: N818 - an outcome, shown as the action's answer
    """The action was not applied: the message says why."""


async def _retry(queue: AsyncQueue, form: FormData) -> str:
    job_id = _field(form, "id")
    if not await queue.retry(job_id):
        raise Refused(f"{job_id} was not retried: it is not failed")
    return f"retried {job_id}"


async def _cancel(queue: AsyncQueue, form: FormData) -> str:
    job_id = _field(form, "id")
    if not await queue.cancel(job_id):
        raise Refused(f"{job_id} was not cancelled: it is not waiting or delayed")
    return f"cancelled {job_id}"


async def _abort(queue: AsyncQueue, form: FormData) -> str:
    job_id = _field(form, "id")
    outcome = await queue.abort(job_id)
    if outcome == "finished":
        raise Refused(f"{job_id} was not aborted: it has already finished")
    return {
        "aborting": f"aborting {job_id}: its worker stops it",
        "cancelled": f"cancelled {job_id}",
    }.get(outcome, f"{job_id}: {outcome}")


async def _release_suspect(queue: AsyncQueue, form: FormData) -> str:
    job_id = _field(form, "id")
    await queue.release_suspect(job_id)  # NotASuspectError: shown as the action's error
    return f"released {job_id}: it runs as any other job"


async def _fail_suspect(queue: AsyncQueue, form: FormData) -> str:
    job_id = _field(form, "id")
    outcome = await queue.fail_suspect(job_id)
    said = {"failed": f"failed {job_id}", "aborting": f"aborting {job_id}: its worker stops it"}
    return said.get(outcome, f"{job_id}: {outcome}")


async def _promote(queue: AsyncQueue, form: FormData) -> str:
    job_id = _field(form, "id")
    if not await queue.promote(job_id):
        raise Refused(f"{job_id} was not promoted: it is not delayed")
    return f"promoted {job_id}"


async def _remove(queue: AsyncQueue, form: FormData) -> str:
    job_id = _field(form, "id")
    outcome = await queue.remove(job_id)
    if outcome == "active":
        raise Refused(f"{job_id} was not removed: it is running (abort it first)")
    if outcome != "removed":
        raise Refused(f"{job_id} was not removed: no such job")
    return f"removed {job_id}"


async def _priority(queue: AsyncQueue, form: FormData) -> str:
    job_id, text = _field(form, "id"), _field(form, "priority")
    priority: int | str = int(text) if text.isdigit() else text
    if not await queue.set_priority(job_id, priority):
        raise Refused(f"{job_id}'s priority was not changed: it is not waiting or delayed")
    return f"{job_id}: priority {text}"


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
        raise Refused(f"not scheduled: data is not JSON ({exc})") from exc
    cron, every = str(form.get("cron") or "").strip(), str(form.get("every") or "").strip()
    try:
        interval = float(every) if every else None
    except ValueError as exc:
        raise Refused(f"not scheduled: every is not a number of seconds: {every!r}") from exc
    known = {t for w in await queue.workers() for t in w.info.get("tasks") or ()}
    if known and task not in known:
        served = ", ".join(sorted(known))
        raise Refused(f"not scheduled: no worker of {queue.name} runs a task {task!r} ({served})")
    await queue.schedule(schedule_id, task, data, cron=cron or None, every=interval)
    return f"scheduled {schedule_id}"


async def _unschedule(queue: AsyncQueue, form: FormData) -> str:
    schedule_id = _field(form, "schedule")
    if not await queue.unschedule(schedule_id):
        raise Refused(f"not removed: no schedule {schedule_id}")
    return f"removed schedule {schedule_id}"


async def _retry_selected(queue: AsyncQueue, form: FormData) -> str:
    ids = _ids(form)
    done = [i for i in ids if await queue.retry(i)]
    return _selected("retried", done, ids, "not failed")


async def _remove_selected(queue: AsyncQueue, form: FormData) -> str:
    ids = _ids(form)
    done = [i for i in ids if await queue.remove(i) == "removed"]
    return _selected("removed", done, ids, "running or gone")


def _selected(verb: str, done: list[str], ids: list[str], why: str) -> str:
    skipped = [i for i in ids if i not in done]
    tail = f"; {len(skipped)} {why}: {', '.join(skipped[:10])}" if skipped else ""
    return f"{verb} {len(done)} of {len(ids)} selected job(s){tail}"


async def _purge(queue: AsyncQueue, form: FormData) -> str:
    state = _field(form, "state")
    return f"removed {await queue.purge(state)} {state} job(s)"


async def _promote_all(queue: AsyncQueue, form: FormData) -> str:
    return f"promoted {await queue.promote_all()} delayed job(s): they run now"


async def _quiet_worker(queue: AsyncQueue, form: FormData) -> str:
    worker = _field(form, "worker")
    await queue.quiet_worker(worker)
    return f"asked {worker} to quiet: it claims no more jobs"


async def _stop_worker(queue: AsyncQueue, form: FormData) -> str:
    worker = _field(form, "worker")
    await queue.stop_worker(worker)
    return f"asked {worker} to stop"


ACTIONS: dict[str, Action] = {
    "retry": _retry, "cancel": _cancel, "abort": _abort, "promote": _promote, "remove": _remove,
    "release_suspect": _release_suspect, "fail_suspect": _fail_suspect,
    "priority": _priority, "retry_failed": _retry_failed, "pause": _pause, "resume": _resume,
    "pause_group": _pause_group, "resume_group": _resume_group, "schedule": _schedule,
    "unschedule": _unschedule, "retry_selected": _retry_selected,
    "remove_selected": _remove_selected, "purge": _purge, "promote_all": _promote_all,
    "quiet_worker": _quiet_worker, "stop_worker": _stop_worker,
}  # fmt: skip
MOST_SELECTED = 1_000
TARGETS = ("id", "state", "group", "worker", "schedule")  # what an action is about


def _field(form: FormData, name: str) -> str:
    value = str(form.get(name) or "").strip()
    if not value:
        raise HTTPException(400, f"missing form field {name!r}")
    return value


def _ids(form: FormData) -> list[str]:
    ids = list(dict.fromkeys(str(i).strip() for i in form.getlist("id") if str(i).strip()))
    if not ids:
        raise HTTPException(400, "select at least one job")
    if len(ids) > MOST_SELECTED:
        raise HTTPException(400, f"select at most {MOST_SELECTED} jobs at once")
    return ids


def _target(form: FormData) -> str:
    for name in TARGETS:
        values = [str(v) for v in form.getlist(name) if str(v).strip()]
        if values:
            return " ".join(values)
    return "queue"


def _back(request: Request, form: FormData) -> str:
    """Where to go after the action: a path of this site only (no open redirect)."""
    back = str(form.get("back") or "")
    if not back.startswith("/") or back.startswith("//") or "\\" in back:
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
    queue = await queue_of(request)
    refused = True
    try:
        message, refused = await action(queue, form), False
    except Refused as exc:
        message = str(exc)
    except ConveyorError as exc:
        message = f"refused: {exc}"
    try:
        await queue.record_audit(
            who=ops.who(request), action=request.path_params["action"], target=_target(form),
            outcome=message, source="dashboard",
        )  # fmt: skip
    except ConveyorError as exc:  # the action stands; the trail misses it
        log.warning("could not record %s in the audit trail: %s", request.url.path, exc)
    target = _back(request, form)
    response = (
        Response(headers={"HX-Redirect": target})
        if request.headers.get("hx-request")
        else RedirectResponse(target, status_code=303)
    )
    fields = {k: str(v) for k, v in form.items() if k not in ("csrf", "back")}
    flash.remember(request, response, message, refused=refused, form=fields)
    return response


def routes() -> list[Route]:
    return [Route("/queues/{name}/do/{action}", act, methods=["POST"], name="act")]

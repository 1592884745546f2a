"""The worker side of ConveyorBackend: each Django task as a Conveyor handler that sends
Django's task_started / task_finished signals and passes a TaskContext to the tasks that
take one."""

from __future__ import annotations

import inspect
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

from django.db import close_old_connections
from django.utils import timezone

from conveyor.client.tasks import Tasks
from conveyor.integrations.django._compat import (
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultStatus,
    task_finished,
    task_started,
)
from conveyor.integrations.django.backend import ConveyorBackend
from conveyor.worker import JobContext, current_job


def conveyor_tasks(backend: ConveyorBackend, queue: str) -> Tasks:
    """A Conveyor `Tasks` of `queue` whose handlers are the backend's Django tasks: every
    one of them, as `task.using(queue_name=...)` may send any task to any of the QUEUES."""
    tasks = Tasks(queue, url=backend.url)
    for path, task in sorted(backend.tasks().items()):
        tasks.task(name=path)(_handler(backend, task))
    return tasks


def tasks_line(backend: ConveyorBackend, queue: str) -> str:
    """The start-up line's part for `queue`: the tasks whose queue it is by default, and how
    many others it runs only when sent there with `using(queue_name=...)`."""
    own = sorted(p for p, t in backend.tasks().items() if t.queue_name == queue)
    others = len(backend.tasks()) - len(own)
    line = f"tasks {own}"
    if others:
        line += f" (and {others} of other queues, if sent here with using(queue_name=...))"
    return line


def _handler(backend: ConveyorBackend, task: Task[..., Any]) -> Callable[[Any], Any]:
    if inspect.iscoroutinefunction(task.func):

        async def run_async(data: Any) -> Any:
            result = _running(backend, task, data)
            await task_started.asend(type(backend), task_result=result)
            try:
                value = await _call(task, result, data)
            except BaseException as exc:
                await task_finished.asend(type(backend), task_result=_failed(result, exc))
                raise
            await task_finished.asend(type(backend), task_result=_succeeded(result, value))
            return value

        return run_async

    def run(data: Any) -> Any:
        close_old_connections()  # a worker thread lives long: as Django does per request
        try:
            result = _running(backend, task, data)
            task_started.send(type(backend), task_result=result)
            try:
                value = _call(task, result, data)
            except BaseException as exc:
                task_finished.send(type(backend), task_result=_failed(result, exc))
                raise
            task_finished.send(type(backend), task_result=_succeeded(result, value))
            return value
        finally:
            close_old_connections()

    return run


def _call(task: Task[..., Any], result: TaskResult[Any, Any], data: Any) -> Any:
    """The task function's return value (an awaitable for an async task)."""
    args, kwargs = list(data.get("args", [])), dict(data.get("kwargs", {}))
    fn: Callable[..., Any | Awaitable[Any]] = task.func
    if task.takes_context:
        return fn(TaskContext(task_result=result), *args, **kwargs)
    return fn(*args, **kwargs)


def _running(backend: ConveyorBackend, task: Task[..., Any], data: Any) -> TaskResult[Any, Any]:
    job: JobContext = current_job()
    now = timezone.now()
    return TaskResult(
        task=task.using(queue_name=job.queue),
        id=job.id,
        status=TaskResultStatus.RUNNING,
        enqueued_at=None,
        started_at=now,
        finished_at=None,
        last_attempted_at=now,
        args=list(data.get("args", [])),
        kwargs=dict(data.get("kwargs", {})),
        backend=backend.alias,
        errors=[],
        worker_ids=[job.worker_id] * job.attempt,
    )


def _succeeded(result: TaskResult[Any, Any], value: Any) -> TaskResult[Any, Any]:
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "_return_value", value)
    return result


def _failed(result: TaskResult[Any, Any], exc: BaseException) -> TaskResult[Any, Any]:
    kind = type(exc)
    error = TaskError(
        exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
        traceback="".join(traceback.format_exception(exc)),
    )
    object.__setattr__(result, "status", TaskResultStatus.FAILED)
    object.__setattr__(result, "finished_at", timezone.now())
    result.errors.append(error)
    return result

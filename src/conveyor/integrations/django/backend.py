"""ConveyorBackend: Django's tasks framework on Conveyor queues."""

from __future__ import annotations

import functools
import os
import re
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core import checks
from django.db import transaction
from django.utils import timezone

from conveyor.client.connection import URL_VARIABLES, resolve_url
from conveyor.client.sync import Queue
from conveyor.errors import ConveyorError
from conveyor.integrations.django._compat import (
    BaseTaskBackend,
    Task,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_enqueued,
)
from conveyor.integrations.django.registry import discover_tasks
from conveyor.job import Job, JobState
from conveyor.options import ENQUEUE_OPTIONS, PRIORITIES, check_name

OPTION_NAMES = frozenset({"URL", "ENQUEUE_ON_COMMIT", "DATABASE", "JOB_OPTIONS", "MODULES"})
# Django's priorities run from -100 to 100, higher first; Conveyor's from 0, lower first.
NORMAL = PRIORITIES["normal"]

STATUS_OF = {
    JobState.WAITING: TaskResultStatus.READY,
    JobState.DELAYED: TaskResultStatus.READY,  # a run_after, or a retry waiting its backoff
    JobState.BLOCKED: TaskResultStatus.READY,
    JobState.WAITING_CHILDREN: TaskResultStatus.READY,
    JobState.ACTIVE: TaskResultStatus.RUNNING,
    JobState.COMPLETED: TaskResultStatus.SUCCESSFUL,
    JobState.FAILED: TaskResultStatus.FAILED,
}


def conveyor_priority(django_priority: int) -> int:
    return NORMAL - django_priority


def django_priority(priority: int) -> int:
    return max(-100, min(100, NORMAL - priority))


class ConveyorBackend(BaseTaskBackend):
    """A `django.tasks` backend that enqueues into Conveyor: each of the backend's QUEUES is
    a Conveyor queue, a task's job is named after its module path (`shop.tasks.send`), its
    data is `{"args": [...], "kwargs": {...}}`, and the result id is the job id.

    OPTIONS (all optional):

    - URL: the Redis URL (default: CONVEYOR_REDIS_URL, else REDIS_URL).
    - ENQUEUE_ON_COMMIT (True): inside a transaction, the job reaches Redis only when the
      transaction commits, and a rollback enqueues nothing. The TaskResult is returned at
      once, READY, with its id. If Redis refuses the job at commit time, the error is raised
      from the commit, after the database committed. False: enqueue at once.
    - DATABASE ("default"): the database whose transactions ENQUEUE_ON_COMMIT follows.
    - JOB_OPTIONS: Conveyor enqueue options for every job (max_failures, timeout,
      result_ttl, ...). Conveyor retries a failed job (3 runs by default): a task waiting
      for its retry is READY again, with its error in `errors`.
    - MODULES: modules to search for tasks besides every installed app's `tasks` module (the
      worker runs, and get_result knows, only tasks found there: nothing is imported by a
      name read from Redis).

    Priorities -100..100 map to Conveyor's 1100..900 (normal is 1000), so a higher Django
    priority runs first. `worker_ids` repeats the job's last worker once per attempt (Conveyor
    keeps the last one only), so `attempts` is the number of runs.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.url: str | None = self.options.get("URL")
        self.enqueue_on_commit = bool(self.options.get("ENQUEUE_ON_COMMIT", True))
        self.database: str = self.options.get("DATABASE", "default")
        self.job_options: dict[str, Any] = dict(self.options.get("JOB_OPTIONS", {}))
        self.modules: tuple[str, ...] = tuple(self.options.get("MODULES", ()))
        self._clients: dict[str, Queue] = {}
        self._tasks: dict[str, Task[..., Any]] | None = None

    # --- producing ---------------------------------------------------------------

    def enqueue(
        self, task: Task[Any, Any], args: Sequence[Any], kwargs: dict[str, Any]
    ) -> TaskResult[Any, Any]:
        self.validate_task(task)
        result: TaskResult[Any, Any] = TaskResult(
            task=task,
            id=uuid.uuid4().hex,
            status=TaskResultStatus.READY,
            enqueued_at=None,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        self.tasks().setdefault(task.module_path, task)
        send = functools.partial(self._send, result)
        if self.enqueue_on_commit:
            transaction.on_commit(send, using=self.database)  # at once outside a transaction
        else:
            send()
        return result

    async def aenqueue(
        self, task: Task[Any, Any], args: Sequence[Any], kwargs: dict[str, Any]
    ) -> TaskResult[Any, Any]:
        """`enqueue` on Django's one sync thread, where the database connection (and the
        transaction an enqueue on commit waits for) lives."""
        enqueue = sync_to_async(self.enqueue, thread_sensitive=True)
        return await enqueue(task, args, kwargs)

    def _send(self, result: TaskResult[Any, Any]) -> None:
        task = result.task
        options: dict[str, Any] = {
            **self.job_options,
            "id": result.id,
            "priority": conveyor_priority(task.priority),
        }
        if task.run_after is not None:
            options["run_at"] = _aware(task.run_after)
        data = {"args": result.args, "kwargs": result.kwargs}
        self._queue(task.queue_name).enqueue(task.module_path, data, **options)
        object.__setattr__(result, "enqueued_at", timezone.now())
        task_enqueued.send(type(self), task_result=result)

    # --- results -----------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult[Any, Any]:
        """The result of the job `result_id`, looked up in each of the backend's QUEUES."""
        for name in sorted(self.queues):
            job = self._queue(name).get(result_id)  # None for an id no job can have, too
            if job is not None:
                return self._result(job)
        raise TaskResultDoesNotExist(result_id)

    async def aget_result(self, result_id: str) -> TaskResult[Any, Any]:
        get_result = sync_to_async(self.get_result, thread_sensitive=True)
        return await get_result(result_id)

    def _result(self, job: Job) -> TaskResult[Any, Any]:
        task = self.tasks().get(job.task)
        if task is None:
            raise TaskResultDoesNotExist(
                f"{job.id}: task {job.task!r} is not a task of backend {self.alias!r} "
                "(not found in the installed apps' tasks modules nor in OPTIONS['MODULES'])"
            )
        task = task.using(queue_name=job.queue, priority=django_priority(job.priority))
        data = job.data if isinstance(job.data, dict) else {}
        result: TaskResult[Any, Any] = TaskResult(
            task=task,
            id=job.id,
            status=STATUS_OF[job.state],
            enqueued_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at if job.finished else None,
            last_attempted_at=job.started_at,
            args=list(data.get("args", [])),
            kwargs=dict(data.get("kwargs", {})),
            backend=self.alias,
            errors=_errors(job),
            worker_ids=[job.worker or ""] * job.attempts,
        )
        if job.state is JobState.COMPLETED:
            object.__setattr__(result, "_return_value", job.result)
        return result

    # --- the tasks, the queues, the checks --------------------------------------------

    def tasks(self) -> dict[str, Task[..., Any]]:
        """The tasks of this backend by module path: found in the installed apps' `tasks`
        modules and OPTIONS['MODULES'] (on first use), plus any enqueued here."""
        if self._tasks is None:
            self._tasks = discover_tasks(self.alias, self.modules)
        return self._tasks

    def _queue(self, name: str) -> Queue:
        queue = self._clients.get(name)
        if queue is None:
            queue = self._clients[name] = Queue(name, url=self.url)
        return queue

    def close(self) -> None:
        """Close the Redis connections this backend opened (in this thread)."""
        for queue in self._clients.values():
            queue.close()
        self._clients.clear()

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        return list(self._problems())

    def _problems(self) -> Any:
        unknown = set(self.options) - OPTION_NAMES
        if unknown:
            yield _error(1, f"unknown OPTIONS {sorted(unknown)}", f"use {sorted(OPTION_NAMES)}")
        bad_job_options = set(self.job_options) - ENQUEUE_OPTIONS
        if bad_job_options:
            yield _error(2, f"unknown JOB_OPTIONS {sorted(bad_job_options)}", None)
        if not self.queues:
            yield _error(3, "QUEUES is empty", "list the queues: get_result looks in each")
        for name in sorted(self.queues):
            try:
                check_name(name, "queue name")
            except ConveyorError as exc:
                yield _error(4, str(exc), None)
        if self.enqueue_on_commit and self.database not in settings.DATABASES:
            yield _error(
                5,
                f"ENQUEUE_ON_COMMIT follows database {self.database!r}, which is not configured",
                "set OPTIONS['DATABASE'], or ENQUEUE_ON_COMMIT False",
            )
        try:
            resolve_url(self.url)
        except ConveyorError as exc:
            if self.url or any(os.environ.get(name) for name in URL_VARIABLES):
                yield _error(6, str(exc), "fix OPTIONS['URL'] or the environment's URL")
            else:  # the embedded Redis is not up yet: not a configuration error
                yield checks.Warning(
                    f"Conveyor task backend: {exc}",
                    hint="set OPTIONS['URL'] or CONVEYOR_REDIS_URL, or start `conveyor redis`",
                    id="conveyor.W001",
                )


def task_error(text: str) -> TaskError:
    """A Django TaskError from Conveyor's error text: `Type: message`, then the traceback,
    whose last line names the exception by its full path (`shop.errors.Declined: ...`)."""
    name = text.partition(":")[0].strip()
    path = f"builtins.{name}"
    for line in reversed(text.splitlines()):
        found = re.match(r"([\w.]+\.)" + re.escape(name) + ":", line)
        if found:
            path = found.group(1) + name
            break
    return TaskError(exception_class_path=path, traceback=text)


def _errors(job: Job) -> list[TaskError]:
    """Every failed run's error, oldest first (Conveyor keeps the last 10)."""
    texts = [attempt.error for attempt in job.errors]
    if not texts and job.error:
        texts = [job.error]
    return [task_error(text) for text in texts]


def _aware(when: datetime) -> datetime:
    return when if timezone.is_aware(when) else timezone.make_aware(when)


def _error(number: int, message: str, hint: str | None) -> checks.Error:
    return checks.Error(f"Conveyor task backend: {message}", hint=hint, id=f"conveyor.E{number:03}")

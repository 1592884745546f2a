"""Helpers for testing code that uses Conveyor, against a real Redis.

    report = BurstWorker(url).drain(tasks)      # run every ready job in-process, then return
    call_task(thumbnail, {"path": "a.jpg"})     # the handler alone, current_job() working
    [job] = enqueued(queue, task="thumbnail")   # what is waiting to run, in run order

The pytest plugin (conveyor.integrations.pytest_plugin) hands these out as fixtures; they need
no pytest. Data and results make the JSON round trip a worker gives them, so a test sees what
production sees (a tuple comes back a list, a datetime is refused).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from conveyor import serializers
from conveyor.client.aio import AsyncQueue
from conveyor.client.sync import Queue
from conveyor.client.tasks import Task, Tasks
from conveyor.errors import ConveyorError
from conveyor.job import Job, JobState
from conveyor.worker import JobContext, Worker, WorkerSettings, running

D = TypeVar("D")
R = TypeVar("R")

# The shortest block on Redis while a drain waits for running jobs; also its horizon for
# delayed jobs when `within` is 0 (a job due that soon is run rather than left behind).
_SHORTEST_WAIT = 0.05
PENDING_STATES = (JobState.WAITING, JobState.DELAYED)


@dataclass(frozen=True, slots=True)
class Drained:
    """What one drain did: jobs completed, and jobs failed for good (retries not counted)."""

    completed: int
    failed: int


class DrainTimeoutError(ConveyorError, TimeoutError):
    """A drain went on longer than its timeout (a job that never ends, or an endless chain)."""


class BurstWorker:
    """Runs a queue dry inside the test process: a real `Worker` in burst mode on the test's
    Redis, returning as soon as no job is ready or running (no idle wait at the end)."""

    def __init__(self, url: str, *, timeout: float = 60.0) -> None:
        self.url = url
        self.timeout = timeout

    def drain(
        self,
        tasks: Tasks,
        *,
        concurrency: int = 1,
        within: float = 0.0,
        failures: bool = False,
        timeout: float | None = None,
    ) -> Drained:
        """Run the jobs of `tasks`' queue until none is ready or running, jobs they enqueue
        included; delayed jobs (retries) run too when due within `within` seconds.
        `concurrency` 1 (the default) runs them one at a time in queue order; `failures`
        runs the failure handlers' lane instead. From async code, await `adrain`."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(
                self.adrain(
                    tasks,
                    concurrency=concurrency,
                    within=within,
                    failures=failures,
                    timeout=timeout,
                )
            )
        raise ConveyorError("drain() called inside a running event loop: await adrain(...)")

    async def adrain(
        self,
        tasks: Tasks,
        *,
        concurrency: int = 1,
        within: float = 0.0,
        failures: bool = False,
        timeout: float | None = None,
    ) -> Drained:
        """`drain` on the running event loop: async handlers run on it, sync ones in threads."""
        settings = WorkerSettings(
            concurrency=concurrency,
            burst=True,
            failures=failures,
            idle_wait=max(within, _SHORTEST_WAIT),
        )
        worker = Worker(tasks, url=self.url, settings=settings)
        run = asyncio.ensure_future(worker.run())
        limit = self.timeout if timeout is None else timeout
        try:
            await asyncio.wait_for(asyncio.shield(run), limit)
        except TimeoutError:
            worker.stop()
            worker.stop()  # the second stop puts unfinished jobs back at once
            await run
            raise DrainTimeoutError(
                f"the queue {tasks.queue_name!r} was not drained within {limit} s "
                f"({worker.processed} completed, {worker.failed} failed)"
            ) from None
        return Drained(completed=worker.processed, failed=worker.failed)


def call_task(
    task: Task[D, R],
    data: D,
    *,
    job_id: str = "test-job",
    attempt: int = 1,
    progress: list[float] | None = None,
) -> R:
    """Call `task`'s handler with `data` as a worker would, without Redis: inside a job context
    (current_job() works; progress reports are appended to `progress`), data and result through
    JSON. An async handler runs to completion on a new event loop; from async code, await
    `acall_task`."""
    job = _job_context(task, data, job_id, attempt, progress)
    with running(job):
        result = cast(Any, task.fn)(job.data)
        if inspect.isawaitable(result):
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                result = asyncio.run(_awaited(result))  # the loop copies our context
            else:
                _discard(result)
                raise ConveyorError(f"task {task.name!r} is async: await acall_task(...)")
    return cast(R, _round_trip(result, "the result"))


async def acall_task(
    task: Task[D, R],
    data: D,
    *,
    job_id: str = "test-job",
    attempt: int = 1,
    progress: list[float] | None = None,
) -> R:
    """`call_task` from async code: an async handler is awaited on the running loop."""
    job = _job_context(task, data, job_id, attempt, progress)
    with running(job):
        result = cast(Any, task.fn)(job.data)
        if inspect.isawaitable(result):
            result = await result
    return cast(R, _round_trip(result, "the result"))


def enqueued(
    queue: Queue, *, task: str | None = None, states: Iterable[JobState] = PENDING_STATES
) -> list[Job]:
    """The jobs of `queue` in `states` (waiting, then delayed, by default), each state in its
    index order (run order, due time), only those of `task` if given. Reads the first
    10,000 of each state: for tests, not for production queues."""
    jobs: list[Job] = []
    for state in states:
        for job_id in queue.job_ids(state, limit=10_000):
            job = queue.get(job_id)
            if job is not None and (task is None or job.task == task):
                jobs.append(job)
    return jobs


async def aenqueued(
    queue: AsyncQueue, *, task: str | None = None, states: Iterable[JobState] = PENDING_STATES
) -> list[Job]:
    """`enqueued` through an `AsyncQueue`."""
    jobs: list[Job] = []
    for state in states:
        for job_id in await queue.job_ids(state, limit=10_000):
            job = await queue.get(job_id)
            if job is not None and (task is None or job.task == task):
                jobs.append(job)
    return jobs


def _job_context(
    task: Task[Any, Any], data: Any, job_id: str, attempt: int, progress: list[float] | None
) -> JobContext:
    reports = progress if progress is not None else []
    return JobContext(
        id=job_id,
        queue=task.tasks.queue_name,
        task=task.name,
        data=_round_trip(data, "data"),
        attempt=attempt,
        token="test-token",
        worker_id="test-worker",
        report_progress=lambda _job, fraction: reports.append(fraction),
    )


def _round_trip(value: Any, what: str) -> Any:
    return serializers.loads(serializers.dumps(value, what=what))


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _discard(awaitable: Awaitable[Any]) -> None:
    """Close a coroutine we will not run (no 'never awaited' warning)."""
    close = getattr(awaitable, "close", None)
    if close is not None:
        close()

"""Batch tasks: a handler that takes a list of jobs' data per call.

    @tasks.task(batch_size=100, batch_timeout=0.5)
    def store(rows: list[dict]) -> list[int | Exception]: ...

A task's held jobs wait in its batch until `batch_size` are there or
`batch_timeout` s passed since the first; then the handler gets their data,
in order, and returns one entry per job: a result, or an exception instance
that fails that job alone. Each job is then acknowledged, retried or failed
on its own (its own retry policy); a handler that raises fails every job of
the call. The earliest timeout of the batch's jobs is the call's. Each job
gets the hooks of a run (before_run, after_*) as a job run alone does, the
call's duration its run time.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from conveyor import serializers
from conveyor.client.tasks import Task
from conveyor.errors import JobTimeoutError, NotSerializableError
from conveyor.hooks import Hooks
from conveyor.hooks import call as call_hooks
from conveyor.worker.context import batch_var, job_var
from conveyor.worker.error_text import describe
from conveyor.worker.execution import (
    NOTHING,
    Failure,
    Outcome,
    Running,
    Success,
    aborted_failure,
    failure_of,
)
from conveyor.worker.outcome_hooks import after_run

log = logging.getLogger("conveyor.worker")

Settle = Callable[[Running, Outcome], None]


class Batches:
    """The open batch of each batch task, and the calls running."""

    def __init__(self, executor: Executor, settle: Settle, hooks: Hooks) -> None:
        self._executor = executor
        self._settle = settle  # write one job's outcome and free its slot
        self._hooks = hooks
        self._open: dict[str, list[Running]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._calls: set[asyncio.Task[None]] = set()

    def put(self, running: Running) -> None:
        task = running.handler
        assert task is not None and task.batch_size is not None
        batch = self._open.setdefault(task.name, [])
        batch.append(running)
        if len(batch) >= task.batch_size:
            self._flush(task)
        elif len(batch) == 1:
            loop = asyncio.get_running_loop()
            self._timers[task.name] = loop.call_later(task.batch_timeout, self._flush, task)

    def take_all(self) -> list[Running]:
        """The jobs of every open batch (none has started): at shutdown."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        waiting = [r for batch in self._open.values() for r in batch]
        self._open.clear()
        return waiting

    async def close(self) -> None:
        for call in self._calls:
            call.cancel()
        await asyncio.gather(*self._calls, return_exceptions=True)

    def _flush(self, task: Task[Any, Any]) -> None:
        timer = self._timers.pop(task.name, None)
        if timer is not None:
            timer.cancel()
        batch = self._open.pop(task.name, [])
        if batch:
            call = asyncio.ensure_future(self._run(task, batch))
            self._calls.add(call)
            call.add_done_callback(self._calls.discard)

    async def _run(self, task: Task[Any, Any], batch: list[Running]) -> None:
        outcomes: list[Outcome] = [None] * len(batch)
        live = []
        for i, running in enumerate(batch):
            if running.problem is not None:  # corrupt, or aborted before it started
                outcomes[i] = Failure(running.problem, True, None)
            elif not running.ctx.lost:
                live.append(i)
        hooks = self._hooks if self._hooks.on_run else None
        told = [hooks is not None and not r.ctx.lost for r in batch]  # lost: never started
        if hooks and hooks.before_run:
            for running, tell in zip(batch, told, strict=True):
                if tell:  # each job current while its hooks run, as when run alone
                    job_var.set(running.ctx)
                    call_hooks(hooks.before_run, running.ctx)
            job_var.set(None)
        started = time.perf_counter()
        try:
            if live:
                results = await self._call(task, [batch[i] for i in live])
                for i, outcome in zip(live, results, strict=True):
                    outcomes[i] = outcome
        finally:
            duration = time.perf_counter() - started
            for i, running in enumerate(batch):
                outcome = outcomes[i]
                if running.ctx.lost:
                    outcome = None
                elif running.aborted:
                    outcome = aborted_failure()
                if isinstance(outcome, Failure):  # the error on_retry / on_final_failure tell
                    running.failure = outcome
                if hooks and told[i]:
                    job_var.set(running.ctx)
                    after_run(hooks, running, outcome, duration)
                self._settle(running, outcome)
            job_var.set(None)

    async def _call(self, task: Task[Any, Any], runnings: list[Running]) -> list[Outcome]:
        """One call of the handler for these jobs; one outcome per job."""
        job_var.set(None)  # this call's own context (a task of its own): no job is current
        batch_var.set(task.name)
        data = [r.ctx.data for r in runnings]
        timeouts = [r.timeout for r in runnings if r.timeout is not None]
        timeout = min(timeouts) if timeouts else None
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            if task.is_async:
                async with asyncio.timeout(timeout):
                    results = await task.fn(data)
            else:
                # a thread cannot be stopped: the call ends when it returns,
                # past its deadline or not (then it failed with a timeout)
                flag = None if timeout is None else loop.call_later(timeout, _cancel, runnings)
                context = contextvars.copy_context()
                try:
                    results = await loop.run_in_executor(self._executor, context.run, task.fn, data)
                finally:
                    if flag is not None:
                        flag.cancel()
                if timeout is not None and loop.time() - started > timeout:
                    raise TimeoutError
        except TimeoutError:
            err = JobTimeoutError(f"timed out after {timeout} s (the batch call)")
            return [Failure(describe(err), False, None, err)] * len(runnings)
        except Exception as exc:
            return [failure_of(exc)] * len(runnings)
        return _per_job(results, len(runnings))


def _cancel(runnings: list[Running]) -> None:
    for running in runnings:
        running.ctx.cancelled = True


def _per_job(results: Any, count: int) -> list[Outcome]:
    if not isinstance(results, list | tuple) or len(results) != count:
        err = TypeError(f"a batch handler must return a list of {count} entries, one per job")
        return [Failure(describe(err), True, None, err)] * count
    return [_one(result) for result in results]


def _one(result: Any) -> Outcome:
    if isinstance(result, BaseException):
        return failure_of(result)
    if result is None:
        return NOTHING
    try:
        return Success(serializers.dumps(result, what="the result"))
    except NotSerializableError as exc:
        return failure_of(exc)

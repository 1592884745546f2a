"""Writes a running handler asks for: its progress, its log lines, its
checkpoint. Async handlers go on at once (the job's outcome is written after
them); sync ones, in a pool thread, wait for the write."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from conveyor.client.aio import AsyncQueue
from conveyor.errors import LeaseLostError
from conveyor.protocol import observe, ops
from conveyor.worker.context import JobContext
from conveyor.worker.execution import Running

log = logging.getLogger("conveyor.worker")


class HandlerWrites:
    def __init__(
        self,
        queue: AsyncQueue,
        loop: asyncio.AbstractEventLoop,
        lease: float,
        held: dict[str, Running],
    ) -> None:
        self._queue = queue
        self._loop = loop
        self._lease = lease
        self._held = held  # the pool's: a write in flight is awaited before the job's outcome

    def progress(self, ctx: JobContext, fraction: float) -> None:
        core = self._queue.core
        call = ops.progress(
            core.keys,
            job_id=ctx.id,
            token=ctx.token,
            value=fraction,
            events_maxlen=core.settings.events_maxlen,
        )
        self._write_for(ctx, call, "progress update")

    def job_log(self, ctx: JobContext, lines: list[str]) -> None:
        call = observe.job_log(self._queue.core.keys, job_id=ctx.id, token=ctx.token, lines=lines)
        self._write_for(ctx, call, "job log write")

    def _write_for(self, ctx: JobContext, call: ops.Call, what: str) -> None:
        """A write from a handler (progress, its log): async handlers go on
        at once, sync ones (in a pool thread) wait for the write."""
        running = self._held.get(ctx.id)
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a sync handler's thread
            future = asyncio.run_coroutine_threadsafe(self._queue.runner.run(call), self._loop)
            try:
                future.result(timeout=self._lease)
            except Exception as exc:  # best effort: the job goes on
                log.warning("%s failed: %s", what, exc)
            return
        task = asyncio.ensure_future(self._queue.runner.run(call))
        task.add_done_callback(log_failure)
        if running is not None:
            running.pending.append(task)

    def checkpoint(self, ctx: JobContext, state: str) -> None:
        """Save a handler's checkpoint: a sync handler (in a pool thread) waits
        for the write and learns of a lost lease; an async one goes on (the
        write lands before its outcome, which is written after it)."""
        call = ops.checkpoint(self._queue.core.keys, job_id=ctx.id, token=ctx.token, state=state)
        if _in_a_thread():
            future = asyncio.run_coroutine_threadsafe(self._queue.runner.run(call), self._loop)
            if int(future.result(timeout=self._lease)) != 1:
                raise LeaseLostError(f"job {ctx.id}: lease lost; checkpoint not saved")
            return
        task = asyncio.ensure_future(self._queue.runner.run(call))
        task.add_done_callback(log_failure)
        running = self._held.get(ctx.id)
        if running is not None:
            running.pending.append(task)


def log_failure(future: Any) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("a write to Redis in the background failed: %s", future.exception())


def _in_a_thread() -> bool:
    """True in a sync handler's pool thread (no running event loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return True
    return False

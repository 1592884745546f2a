"""Suspects (protocol §6.2): jobs whose last run ended without an outcome (its
worker died, or stopped past its lease). Each runs in a child process of its
own, whatever its task's executor, so that if it kills its process again it
takes no other job down; a worker runs up to `suspects` of them at once (each
costs one slot) and its other slots keep serving every queue meanwhile. A
suspect that cannot run in a child (a batch task, a task not defined in a
module-level Tasks, a flow parent) runs in the worker, and the worker then
takes no other suspect until it ends.

The children have the worker's child limits: the job's timeout stops it,
`max_memory_per_child` and `max_tasks_per_child` recycle it; they are started at
the first suspect and kept for the next (a suspect that kills its child gets a
new one). No job waits in a busy child's pipe: one job per child. A child that
dies running a suspect writes no outcome: its lease lapses and the reaper counts
the stall, as for the worker it killed before, so `max_stalls` still bounds the
runs of a job that kills whatever runs it.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from conveyor.client.aio import AsyncQueue
from conveyor.client.tasks import Task, Tasks
from conveyor.worker.context import JobContext
from conveyor.worker.execution import Outcome, Running
from conveyor.worker.processes import PoolSettings, ProcessPool

log = logging.getLogger("conveyor.worker")


class SuspectLane:
    """The suspects a queue's job pool holds, and the child that runs them."""

    runs_sync = True  # execution.Processes: every handler given here runs in the child

    def __init__(
        self,
        settings: PoolSettings,
        most: int,
        on_progress: Callable[[JobContext, float], None],
        on_done: Callable[[], None] | None = None,
    ) -> None:
        self.ids: set[str] = set()  # suspects held: claimed, running or awaiting their outcome
        self.unisolated: set[str] = set()  # those of ids that run in the worker itself
        self._on_done = on_done  # one is let go: the worker may take another
        self._settings = PoolSettings(
            size=most,
            max_tasks_per_child=settings.max_tasks_per_child,
            max_memory_per_child=settings.max_memory_per_child,
            send_ahead=False,
        )
        self._progress = on_progress
        self._children: ProcessPool | None = None
        self._isolable: dict[str, bool] = {}

    def hold(self, running: Running, stalls: int) -> None:
        """A claimed suspect: held here, run isolated if its handler can be."""
        ctx = running.ctx
        self.ids.add(ctx.id)
        handler = running.handler
        if handler is None or running.problem is not None:
            return  # failed unrun: nothing to isolate
        if self._can_isolate(handler):
            running.isolated = True
            log.warning(
                "job %s (task %s, attempt %d) is a suspect: its last run ended without an "
                "outcome (its worker died or stopped past its lease; stalls=%d); running it in "
                "a child process of its own",
                ctx.id, ctx.task, ctx.attempt, stalls,
            )  # fmt: skip
        else:
            self.unisolated.add(ctx.id)
            log.warning(
                "job %s (task %s, attempt %d) is a suspect (stalls=%d) but cannot run in a "
                "child process (%s): running it in the worker, the only suspect here",
                ctx.id, ctx.task, ctx.attempt, stalls,
                "a batch task" if handler.batch_size is not None
                else "its task is not defined in a module-level Tasks",
            )  # fmt: skip

    async def is_flow_parent(self, queue: AsyncQueue, job_id: str) -> bool:
        """A suspect with children reads them through its worker: it runs in
        the worker (the only suspect it then takes), not in a child process."""
        (fields,) = await queue.job_fields([job_id], "children")
        if int(fields.get("children") or 0) == 0:
            return False
        log.warning("job %s: a suspect flow parent runs in the worker, not a child", job_id)
        self.unisolated.add(job_id)
        return True

    def let_go(self, job_id: str) -> None:
        if job_id in self.ids:
            self.ids.discard(job_id)
            self.unisolated.discard(job_id)
            if self._on_done is not None:
                self._on_done()

    async def run(self, running: Running) -> Outcome:
        """Run a suspect in the child (execution.Processes); None when the
        child died: no outcome, the lease lapses, the reaper counts a stall."""
        children = self._children
        if children is None:
            children = self._children = ProcessPool(
                self._settings, on_progress=self._progress, deaths_stall=True
            )
            children.start()
        return await children.run(running)

    async def close(self) -> None:
        if self._children is not None:
            await self._children.close()

    @property
    def pids(self) -> list[int]:
        return [] if self._children is None else self._children.pids

    def _can_isolate(self, handler: Task[Any, Any]) -> bool:
        """A child finds a handler again by its module's Tasks (child.py);
        a batch handler takes a list of jobs, which a child does not run."""
        known = self._isolable.get(handler.name)
        if known is None:
            known = self._isolable[handler.name] = (
                handler.batch_size is None and _found_at_module_level(handler)
            )
        return known


def _found_at_module_level(handler: Task[Any, Any]) -> bool:
    module = sys.modules.get(str(handler.fn.__module__))
    if module is None:
        return False
    for value in list(vars(module).values()):
        if not isinstance(value, Tasks):
            continue
        if handler in (value.handlers.get(handler.name), value.failure_handlers.get(handler.name)):
            return True
    return False

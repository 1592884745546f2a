"""Flows inside a handler (worker/context.py's FlowAccess): read a parent's
children, and the step-job pattern, where a running job adds children to
itself and gives up its slot until they have settled (docs/protocol.md §14.10)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from conveyor.client.aio import AsyncQueue
from conveyor.client.flows import ChildrenResults, FlowEnqueued, FlowJob, FlowPlan
from conveyor.errors import ConveyorError
from conveyor.protocol import flows, ops
from conveyor.worker.context import JobContext


class LeaseLostError(ConveyorError):
    """The run's lease was lost before its children could be added."""


class WorkerFlows:
    """FlowAccess for the jobs of one worker's queue."""

    def __init__(self, queue: AsyncQueue, on_handed_off: Callable[[], None] | None = None) -> None:
        self.queue = queue
        self.on_handed_off = on_handed_off  # a failed wait's hand-off is in the outbox

    async def children(self, ctx: JobContext) -> ChildrenResults:
        return await self.queue.children_results(ctx.id)

    async def add_children(
        self, ctx: JobContext, children: Sequence[FlowJob]
    ) -> list[FlowEnqueued]:
        """Attach the children's references to the running job (fenced by
        its token), then write them top-down, as enqueue_flow does."""
        queue = self.queue
        core = queue.core
        plan = FlowPlan(
            children, queue=queue.name, prefix=core.keys.prefix, specs=core.specs,
            events_maxlen=core.settings.events_maxlen, parent=flows.reference(queue.name, ctx.id),
        )  # fmt: skip
        attached = await queue.runner.run(
            flows.flow_attach(core.keys, ctx.id, ctx.token, plan.root_refs)
        )
        if int(attached) < 0:
            ctx.lost = True
            raise LeaseLostError(f"job {ctx.id}: lease lost, no children added")
        return await queue.send_plan(plan)

    async def wait(self, ctx: JobContext) -> str:
        core = self.queue.core
        call = flows.flow_wait(
            core.keys, ctx.id, ctx.token, events_maxlen=core.settings.events_maxlen
        )
        reply = await self.queue.runner.run(call)
        if ops.marked(reply) and self.on_handed_off is not None:
            self.on_handed_off()
        return ops.word(reply)

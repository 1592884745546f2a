"""The flows half of AsyncQueue (aio.py): trees of jobs, pipelines and reading
a flow's children. AsyncQueue inherits it; the connection, `check`, the enqueue
path and `peer` (the queue of another name, on the same server) are AsyncQueue's."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Unpack

import redis.asyncio

from conveyor.client.core import QueueCore
from conveyor.client.flows import (
    ChildrenCounts,
    ChildrenResults,
    FlowEnqueued,
    FlowJob,
    FlowNode,
    FlowPlan,
    children_keys,
    children_results,
    counts_of,
    node_of,
)
from conveyor.client.models import Enqueued, EnqueueOptions
from conveyor.client.pipelines import PIPELINE_TASK, StepGroup, pipeline_data
from conveyor.client.transport import translated
from conveyor.options import check_job_id
from conveyor.protocol import ops
from conveyor.protocol.flows import reference, split_reference


class AsyncQueueFlows:
    """Flows and pipelines of one queue; AsyncQueue provides the connection
    (`client`), `check`, the enqueue path and `peer` these use."""

    core: QueueCore

    @property
    def client(self) -> redis.asyncio.Redis:
        raise NotImplementedError  # AsyncQueue's

    async def check(self) -> None:
        raise NotImplementedError  # AsyncQueue's

    async def enqueue(
        self, task: str, data: Any = None, **options: Unpack[EnqueueOptions]
    ) -> Enqueued:
        raise NotImplementedError  # AsyncQueue's

    async def _send_enqueues(self, calls: list[ops.Call]) -> list[Any]:
        raise NotImplementedError  # AsyncQueue's

    def peer(self, name: str) -> AsyncQueueFlows:
        raise NotImplementedError  # AsyncQueue's: it makes AsyncQueues

    # --- flows -------------------------------------------------------------------

    async def enqueue_flow(self, flow: FlowJob, *, chunk_size: int = 500) -> FlowEnqueued:
        """Enqueue a tree of jobs: each parent waits in waiting_children until
        its children settled, then runs with their results. Nodes are written
        top-down, parents first; sending the same tree again (same ids)
        changes nothing that exists and completes what a broken send left.
        Every node is validated first: a bad option or one id twice under a
        parent (DuplicateChildError) writes nothing. The root may carry an id
        or a dedup key: if it exists or is deduplicated, nothing under it is
        written (docs/guide/flows.md)."""
        core = self.core
        plan = FlowPlan(
            [flow], queue=core.name, prefix=core.keys.prefix, specs=core.specs,
            events_maxlen=core.settings.events_maxlen, chunk_size=chunk_size,
        )  # fmt: skip
        return (await self.send_plan(plan))[0]

    async def send_plan(self, plan: FlowPlan) -> list[FlowEnqueued]:
        """Write a FlowPlan's calls in order, each on its own queue's slot;
        a call with nothing left to write (under nodes not created) is not sent."""
        for flow_call in plan.calls:
            call = plan.call_for(flow_call)
            if call is None:
                continue
            queue = self.peer(flow_call.queue)
            await queue.check()
            plan.record(flow_call, (await queue._send_enqueues([call]))[0])
        return plan.result()

    async def enqueue_pipeline(
        self,
        steps: Sequence[StepGroup],
        data: Any = None,
        *,
        state: Mapping[str, Any] | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> Enqueued:
        """Enqueue a pipeline (client/pipelines.py): its steps run one after
        the other, each in its own queue, a list of steps as a fan-out. Give
        `data` or `state`, not both (ValidationError). With `data`, each
        step's job gets the result of the step before as its data (the first:
        `data`; after a fan-out: a mapping of results by step name). With
        `state`, every step's job gets the shared state mapping, which each
        result that is a mapping updates (after a fan-out, in the order of
        its steps: on a key two steps both return, the later step in the
        list wins). The driver job runs in this queue: its result is the
        last step's result, or the final state. Step options are a flow
        child's (no upsert rules, no dedup)."""
        spec = pipeline_data(steps, data, state, self.core.specs)
        return await self.enqueue(PIPELINE_TASK, spec, **options)

    async def children_results(self, job_id: str) -> ChildrenResults:
        """What the children of parent `job_id` left it (see ChildrenResults)."""
        keys = children_keys(self.core.keys, check_job_id(job_id))
        with translated():
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.hgetall(key)
            return children_results(*(await pipe.execute()))

    async def children_counts(self, job_id: str) -> ChildrenCounts:
        """Children of parent `job_id`: all, pending, completed, ignored, failed."""
        return (await self._counts([job_id]))[0]

    async def _counts(self, job_ids: list[str]) -> list[ChildrenCounts]:
        with translated():
            pipe = self.client.pipeline(transaction=False)
            keys = self.core.keys
            for job_id in map(check_job_id, job_ids):
                pipe.zcard(keys.children(job_id))
                pipe.scard(keys.pending(job_id))
                for key in children_keys(keys, job_id):
                    pipe.hlen(key)
            replies = (await pipe.execute()) if job_ids else []
        return [counts_of(replies[i : i + 5]) for i in range(0, len(replies), 5)]

    async def flow(self, job_id: str, *, offset: int = 0, limit: int = 100) -> FlowNode:
        """Node `job_id` of a flow with one page of its children (in the order
        added), each with its state, result, error and child counts; page on
        with `offset`, go down with the child's own queue's flow()."""
        with translated():
            raw = await self.client.hgetall(self.core.job_key(job_id))
            end = offset + limit - 1
            refs = await self.client.zrange(self.core.keys.children(job_id), offset, end)
        children = []
        for ref in (ops.text(r) for r in refs):
            queue_name, child_id = split_reference(ref)
            peer = self.peer(queue_name)
            with translated():
                child_raw = await peer.client.hgetall(peer.core.job_key(child_id))
            counts = (await peer._counts([child_id]))[0]
            children.append(node_of(ref, child_raw, counts))
        node = node_of(reference(self.core.name, job_id), raw, (await self._counts([job_id]))[0])
        return dataclasses.replace(node, children=tuple(children))

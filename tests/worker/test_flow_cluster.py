"""Flows on a 3-master Redis Cluster: every queue of the tree on another master, so every
hand-off crosses slots through the outbox (protocol §14.5)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from conveyor import AsyncQueue, FlowJob, Queue
from conveyor.client.tasks import Tasks
from conveyor.integrations.redis_server import RedisProcess
from conveyor.worker import current_job
from support.cluster import cluster_url, owner_port, start_cluster
from support.servers import ServerFactory
from support.workers import WorkerRunner, wait_until

FAST = {"lease": 3.0, "heartbeat_interval": 0.2}


@pytest.fixture
def cluster(server_factory: ServerFactory) -> list[RedisProcess]:
    return start_cluster(server_factory, masters=3)


def _queues_on_distinct_masters(nodes: list[RedisProcess]) -> list[str]:
    names: dict[int, str] = {}
    for i in range(1000):
        names.setdefault(owner_port(nodes, f"conveyor:{{f{i}}}:"), f"f{i}")
        if len(names) == 3:
            return list(names.values())
    raise AssertionError("no queue names spread over the masters")


def test_a_tree_over_three_masters_fans_in_to_its_root(cluster: list[RedisProcess]) -> None:
    url = cluster_url(cluster)
    top, mid, low = _queues_on_distinct_masters(cluster)
    tasks = {name: Tasks(name, url=url) for name in (top, mid, low)}

    for t in tasks.values():

        @t.task(name="sum")
        async def total(n: int) -> int:
            children = await current_job().children_async()
            return n + sum(children.results.values())

    def node(queue: str, n: int, *children: FlowJob, **kw: Any) -> FlowJob:
        return FlowJob(task="sum", data=n, queue=queue, children=children, **kw)

    # 1 + (10 + 100 + 1000) + (20 + 200), the `low` leaves across the third master
    tree = node(
        top, 1,
        node(mid, 10, node(low, 100), node(low, 1000)),
        node(low, 20, node(mid, 200)),
        node(mid, 0, node(low, 0, options={"max_failures": 1}), on_fail="ignore"),
    )  # fmt: skip
    runner = WorkerRunner(url)
    try:
        with Queue(top, url=url) as queue:
            done = queue.enqueue_flow(tree)

            async def enqueue_async() -> str:
                async with AsyncQueue(top, url=url) as aqueue:
                    return (await aqueue.enqueue_flow(tree)).id

            second = asyncio.run(enqueue_async())
            for t in tasks.values():
                runner.start(t, **FAST)
            assert queue.wait_result(done.id, timeout=60) == 1 + 1110 + 220
            assert queue.wait_result(second, timeout=60) == 1 + 1110 + 220
            for name in (top, mid, low):
                peer = queue.peer(name)
                wait_until(lambda p=peer: p.client.xlen(p.core.keys.outbox) == 0, timeout=30)
                assert peer.client.zcard(peer.core.keys.waiting_children) == 0
    finally:
        runner.stop_all()

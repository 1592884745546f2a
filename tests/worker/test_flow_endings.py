"""Every ending of a child reaches a parent in another queue at once, with the
default lease (a beat every 10 s): a failure under each policy, an abort, a
final stall, a cancel of a subtree over three queues (protocol §14.5, the
outbox signal, and §14.9). Bounds are 1 s, about 100x the expected figure."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from conveyor import Job, JobState, Queue
from conveyor.client.flows import FailurePolicy
from conveyor.client.tasks import Tasks
from conveyor.protocol import ops
from conveyor.worker import current_job
from support.workers import WorkerRunner, wait_until

BOUND = 1.0  # seconds from a child's ending to its parent's reaction


@pytest.fixture
def queues(redis_url: str) -> Iterator[list[Queue]]:
    """Two more queues of the test's own."""
    made = [Queue("t-" + uuid.uuid4().hex[:12], url=redis_url) for _ in range(2)]
    yield made
    for q in made:
        q.close()


def settled(queue: Queue, job_id: str, *states: JobState) -> Job:
    job = wait_until(lambda: (j := queue.get(job_id)) is not None and j.state in states and j, 20)
    assert isinstance(job, Job)
    return job


def seconds(later: datetime | None, earlier: datetime | None) -> float:
    assert later is not None and earlier is not None
    return (later - earlier).total_seconds()


def serving(worker_runner: WorkerRunner, *tasks: Tasks) -> None:
    """Workers with the default lease on each queue, past their first beat
    (whose drain would otherwise carry a hand-off by chance)."""
    for t in tasks:
        worker_runner.start(t)
    for t in tasks:
        with Queue(t.queue_name, url=t.url) as q:
            wait_until(lambda q=q: q.client.zcard(q.core.keys.workers) > 0)
    time.sleep(0.5)


@pytest.mark.parametrize("policy", ["fail", "continue", "ignore"])
def test_a_parent_in_another_queue_reacts_to_a_failing_child_at_once(
    redis_url: str, sync_queue: Queue, queues: list[Queue], worker_runner: WorkerRunner,
    policy: FailurePolicy,
) -> None:  # fmt: skip
    parents, kids = Tasks(sync_queue.name, url=redis_url), Tasks(queues[0].name, url=redis_url)

    @parents.task
    async def top(data: None) -> None:
        return None

    @kids.task
    async def good(data: None) -> int:
        return 1

    @kids.task(max_failures=1)
    async def bad(data: None) -> None:
        await asyncio.sleep(0.3)  # the last child to settle (for ignore)
        raise ValueError("bad input")

    serving(worker_runner, parents, kids)
    root = sync_queue.enqueue_flow(
        top.node(None, children=[good.node(None), bad.node(None, id="bad", on_fail=policy)])
    )
    child = settled(queues[0], "bad", JobState.FAILED)
    if policy == "fail":
        parent = settled(sync_queue, root.id, JobState.FAILED)
        assert "ChildFailedError" in (parent.error or "")
        assert seconds(parent.finished_at, child.finished_at) < BOUND
    else:
        parent = settled(sync_queue, root.id, JobState.ACTIVE, JobState.COMPLETED)
        assert seconds(parent.started_at, child.finished_at) < BOUND


def test_an_aborted_child_fails_its_parent_in_another_queue_at_once(
    redis_url: str, sync_queue: Queue, queues: list[Queue], worker_runner: WorkerRunner
) -> None:
    parents, kids = Tasks(sync_queue.name, url=redis_url), Tasks(queues[0].name, url=redis_url)

    @parents.task
    async def top(data: None) -> None:
        return None

    @kids.task
    async def slow(data: None) -> None:
        await asyncio.sleep(60)

    serving(worker_runner, parents, kids)
    root = sync_queue.enqueue_flow(top.node(None, children=[slow.node(None, id="slow")]))
    settled(queues[0], "slow", JobState.ACTIVE)
    assert queues[0].abort("slow") == "aborting"
    child = settled(queues[0], "slow", JobState.FAILED)
    assert (child.error or "").startswith("AbortedError")
    parent = settled(sync_queue, root.id, JobState.FAILED)
    assert seconds(parent.finished_at, child.finished_at) < BOUND


def test_a_waiting_child_aborted_tells_its_parent_before_abort_returns(
    redis_url: str, sync_queue: Queue, queues: list[Queue]
) -> None:
    """No worker anywhere: the client carries the hand-off itself."""
    root = sync_queue.enqueue_flow(
        Tasks(sync_queue.name, url=redis_url).task(lambda data: None, name="top").node(
            None, children=[Tasks(queues[0].name, url=redis_url).task(
                lambda data: None, name="leaf").node(None, id="leaf")],
        )
    )  # fmt: skip
    assert queues[0].abort("leaf") == "cancelled"
    parent = sync_queue.get(root.id)
    assert parent is not None and parent.state is JobState.FAILED
    assert "CancelledError" in (parent.error or "")


def test_a_final_stall_climbs_two_queues_at_once(
    redis_url: str, sync_queue: Queue, queues: list[Queue], worker_runner: WorkerRunner
) -> None:
    """g (this queue) <- p (queue 1) <- c (queue 2). c's worker died holding
    it; the reaper of queue 2 fails it for good, and its courier carries the
    failure to p, then p's to g: no worker serves queue 1 or this queue."""
    top = Tasks(sync_queue.name, url=redis_url).task(lambda data: None, name="top")
    mid = Tasks(queues[0].name, url=redis_url).task(lambda data: None, name="mid")
    kids = Tasks(queues[1].name, url=redis_url)

    @kids.task
    async def leaf(data: None) -> None:
        return None

    c = leaf.node(None, id="c", max_stalls=1)
    root = sync_queue.enqueue_flow(top.node(None, children=[mid.node(None, children=[c])]))
    lost = queues[1]  # a worker that claims c, then dies: its lease runs out
    call = ops.claim(
        lost.core.keys, worker_id="dead", count=1, lease_ms=50, token="gone", promote=10,
        events_maxlen=1000,
    )  # fmt: skip
    lost.check()
    assert [j.id for j in ops.decode_claim(lost.runner.run(call)).jobs] == ["c"]
    time.sleep(0.1)
    worker_runner.start(kids)  # default lease: it reaps at its first beat
    child = settled(queues[1], "c", JobState.FAILED)
    assert (child.error or "").startswith("StalledError")
    parent = settled(sync_queue, root.id, JobState.FAILED)
    assert seconds(parent.finished_at, child.finished_at) < BOUND
    assert all(q.client.xlen(q.core.keys.outbox) == 0 for q in [sync_queue, *queues])


def three_levels(
    redis_url: str, names: list[str], starts: list[float], *, fan: int = 20, leaves: int = 5
) -> tuple[list[Tasks], Any]:
    """A root in names[0] with `fan` children in names[1], each with
    `leaves` children in names[2]; each run notes when it started."""
    tasks = [Tasks(n, url=redis_url) for n in names]
    for t in tasks:

        @t.task(name="step")
        async def step(data: Any) -> None:
            starts.append(time.time())
            await asyncio.sleep(0.2)

    node = [t.handlers["step"].node for t in tasks]
    tree = node[0]("root", id="root", children=[
        node[1](i, children=[node[2](j) for j in range(leaves)]) for i in range(fan)
    ])  # fmt: skip
    return tasks, tree


def test_cancelling_a_tree_over_three_queues_starts_nothing_a_second_later(
    redis_url: str, sync_queue: Queue, queues: list[Queue], worker_runner: WorkerRunner
) -> None:
    starts: list[float] = []
    names = [sync_queue.name, *(q.name for q in queues)]
    tasks, tree = three_levels(redis_url, names, starts)
    serving(worker_runner, *tasks)
    sync_queue.enqueue_flow(tree)
    wait_until(lambda: len(starts) >= 4)  # leaves run
    assert sync_queue.cancel("root")
    returned = time.time()
    time.sleep(2.5)
    assert max(starts) - returned < BOUND
    for q in [sync_queue, *queues]:  # nothing left to run or to carry
        counts = q.counts()
        assert (counts["waiting"], counts["delayed"], counts["waiting_children"]) == (0, 0, 0)
        assert q.client.xlen(q.core.keys.outbox) == 0


@pytest.mark.parametrize("how", ["cancel", "remove"])
def test_a_subtree_over_three_queues_goes_with_no_worker_running(
    redis_url: str, sync_queue: Queue, queues: list[Queue], how: str
) -> None:
    names = [sync_queue.name, *(q.name for q in queues)]
    _, tree = three_levels(redis_url, names, [], fan=30, leaves=10)
    sync_queue.enqueue_flow(tree)
    assert sync_queue.cancel("root") if how == "cancel" else sync_queue.remove("root") == "removed"
    for q in [sync_queue, *queues]:
        assert sum(q.counts().values()) == 0
        assert q.client.xlen(q.core.keys.outbox) == 0


def test_a_burst_worker_carries_a_failure_two_queues_up_before_it_exits(
    redis_url: str, sync_queue: Queue, queues: list[Queue], worker_runner: WorkerRunner
) -> None:
    top = Tasks(sync_queue.name, url=redis_url).task(lambda data: None, name="top")
    mid = Tasks(queues[0].name, url=redis_url).task(lambda data: None, name="mid")
    kids = Tasks(queues[1].name, url=redis_url)

    @kids.task(max_failures=1)
    async def bad(data: None) -> None:
        raise ValueError("bad input")

    tree = top.node(None, children=[mid.node(None, children=[bad.node(None)])])
    root = sync_queue.enqueue_flow(tree)
    handle = worker_runner.start(kids, burst=True, idle_wait=1.0)
    handle.thread.join(30)
    assert not handle.thread.is_alive()
    parent = sync_queue.get(root.id)
    assert parent is not None and parent.state is JobState.FAILED


def test_a_reaper_carries_a_final_stall_at_once_not_at_its_courier_s_next_round(
    redis_url: str, sync_queue: Queue, queues: list[Queue], worker_runner: WorkerRunner
) -> None:
    """The worker's courier drained 4 s after its heartbeat's phase (a completion nudged it),
    so its own rounds come 4 s after each reap: the stall's hand-off must not wait for them."""
    top = Tasks(sync_queue.name, url=redis_url).task(lambda data: None, name="top")
    kids = Tasks(queues[0].name, url=redis_url)

    @kids.task
    async def leaf(data: None) -> None:
        return None

    c = leaf.node(None, id="c", max_stalls=1)
    stalled = sync_queue.enqueue_flow(top.node(None, children=[c]))
    lost = queues[0]
    lost.check()
    claim = ops.claim(
        lost.core.keys, worker_id="dead", count=1, lease_ms=60_000, token="gone", promote=10,
        events_maxlen=1000,
    )  # fmt: skip
    assert [j.id for j in ops.decode_claim(lost.runner.run(claim)).jobs] == ["c"]
    worker_runner.start(kids)  # default lease: it beats (and reaps) every 10 s
    wait_until(lambda: lost.client.zcard(lost.core.keys.workers) > 0)
    time.sleep(4.0)
    warm = sync_queue.enqueue_flow(top.node(None, children=[leaf.node(None)]))
    settled(queues[0], warm.children[0].id, JobState.COMPLETED)  # the courier drains now
    lost.client.zadd(lost.core.keys.active, {"c": 0})  # the dead worker's lease ran out
    child = settled(queues[0], "c", JobState.FAILED)  # at the next beat
    parent = settled(sync_queue, stalled.id, JobState.FAILED)
    assert seconds(parent.finished_at, child.finished_at) < BOUND


def test_a_step_job_failed_at_its_wait_reaches_its_parent_at_once(
    redis_url: str, sync_queue: Queue, queues: list[Queue], worker_runner: WorkerRunner
) -> None:
    """g (no worker) <- s, a step job in queue 0 whose child in queue 1 fails while s runs:
    s fails when it waits (flow_wait), and g hears of it at once."""
    top = Tasks(sync_queue.name, url=redis_url).task(lambda data: None, name="top")
    steps, kids = Tasks(queues[0].name, url=redis_url), Tasks(queues[1].name, url=redis_url)

    @kids.task(max_failures=1)
    async def bad(data: None) -> None:
        raise ValueError("bad input")

    @steps.task
    async def step(data: None) -> None:
        job = current_job()
        await job.add_children_async([bad.node(None, id="bad")])
        await asyncio.sleep(1.0)  # the child fails meanwhile
        await job.wait_for_children_async()

    serving(worker_runner, steps, kids)
    root = sync_queue.enqueue_flow(top.node(None, children=[step.node(None, id="s")]))
    s = settled(queues[0], "s", JobState.FAILED)
    assert "ChildFailedError" in (s.error or "")
    parent = settled(sync_queue, root.id, JobState.FAILED)
    assert seconds(parent.finished_at, s.finished_at) < BOUND

"""Flows run by real workers: fan-out, fan-in, children's results in the
parent's handler, cross-queue hand-offs, failure policies (protocol §14)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from conveyor import JobState, Queue
from conveyor.client.tasks import Tasks
from conveyor.errors import ConveyorError, JobFailedError
from conveyor.worker import current_job
from support.workers import WorkerRunner, wait_until

FAST = {"lease": 3.0, "heartbeat_interval": 0.2}  # the courier drains on every beat


def test_a_parent_runs_once_after_its_children_with_their_results(
    redis_url: str, queue_name: str, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    tasks = Tasks(queue_name, url=redis_url)
    runs: list[str] = []

    @tasks.task
    def square(n: int) -> int:
        runs.append(current_job().id)
        if n == 3:
            raise ValueError("three is right out")
        return n * n

    @tasks.task
    def total(data: None) -> dict[str, Any]:
        children = current_job().children()
        runs.append(current_job().id)
        return {"results": children.results, "ignored": list(children.ignored)}

    kids = [
        square.node(n, id=f"sq{n}", on_fail="ignore" if n == 3 else "fail") for n in range(1, 5)
    ]
    done = sync_queue.enqueue_flow(total.node(None, id="sum", children=kids))
    assert done.state is JobState.WAITING_CHILDREN
    worker_runner.start(tasks, concurrency=4, **FAST)
    result = sync_queue.wait_result("sum", timeout=20)
    assert result == {"results": {"sq1": 1, "sq2": 4, "sq4": 16}, "ignored": ["sq3"]}
    assert runs[-1] == "sum" and runs.count("sum") == 1
    counts = sync_queue.children_counts("sum")
    assert (counts.total, counts.pending, counts.processed, counts.ignored) == (4, 0, 3, 1)
    events = [e.name for e in sync_queue.events(after="0", count=1000)]
    assert "waiting_children" in events and "children_done" in events


def test_children_in_other_queues_hand_off_through_the_outbox(
    redis_url: str, queue_name: str, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    parents = Tasks(queue_name, url=redis_url)
    names = ["t-" + uuid.uuid4().hex[:12] for _ in range(2)]
    kids = [Tasks(name, url=redis_url) for name in names]

    @parents.task
    async def collect(data: None) -> list[Any]:
        children = await current_job().children_async()
        with pytest.raises(ConveyorError, match="children_async"):
            current_job().children()  # the sync form would block the loop
        return sorted(children.results.values())

    for t in kids:

        @t.task(name="echo")
        async def echo(data: str) -> str:
            return data

    # two levels across queues: collect <- echo (queue 0) <- echo (queue 1)
    inner = kids[1].handlers["echo"].node("deep")
    middle = kids[0].handlers["echo"].node("middle", children=[inner])
    leaf = kids[1].handlers["echo"].node("leaf")
    done = sync_queue.enqueue_flow(collect.node(None, children=[middle, leaf]))
    for t in [parents, *kids]:
        worker_runner.start(t, **FAST)
    assert sync_queue.wait_result(done.id, timeout=30) == ["leaf", "middle"]
    for name in names:  # every hand-off was carried and deleted
        with Queue(name, url=redis_url) as q:
            assert q.client.xlen(q.core.keys.outbox) == 0


def test_a_failed_child_fails_the_parent_and_up_the_tree(
    redis_url: str, queue_name: str, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    tasks = Tasks(queue_name, url=redis_url)
    ran: list[str] = []

    @tasks.task(max_failures=1)
    def step(data: str) -> str:
        ran.append(data)
        if data == "bad":
            raise ValueError("bad input")
        return data

    tree = step.node("root", children=[step.node("mid", children=[step.node("bad")])])
    done = sync_queue.enqueue_flow(tree)
    worker_runner.start(tasks, **FAST)
    with pytest.raises(JobFailedError, match="ChildFailedError"):
        sync_queue.wait_result(done.id, timeout=20)
    assert ran == ["bad"]  # neither parent ran
    mid = sync_queue.get(done.children[0].id)
    assert mid is not None and mid.state is JobState.FAILED and "bad input" in (mid.error or "")


def test_continue_runs_the_parent_at_once_and_remove_forgets_the_child(
    redis_url: str, queue_name: str, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task(max_failures=1)
    def boom(data: None) -> None:
        raise RuntimeError("boom")

    @tasks.task
    def parent(data: None) -> dict[str, Any]:
        c = current_job().children()
        return {"results": c.results, "failed": sorted(c.failed), "ignored": sorted(c.ignored)}

    removed = sync_queue.enqueue_flow(
        parent.node(None, children=[boom.node(None, on_fail="remove"), parent.node(None)])
    )
    worker_runner.start(tasks, **FAST)
    (inner,) = [c for c in removed.children if c.id != removed.children[0].id]
    assert sync_queue.wait_result(removed.id, timeout=20) == {
        "results": {inner.id: {"results": {}, "failed": [], "ignored": []}},
        "failed": [], "ignored": [],
    }  # fmt: skip
    cont = sync_queue.enqueue_flow(
        parent.node(None, children=[boom.node(None, id="b", on_fail="continue")])
    )
    assert sync_queue.wait_result(cont.id, timeout=20) == {
        "results": {}, "failed": ["b"], "ignored": []
    }  # fmt: skip


def test_cancelling_a_parent_cancels_its_pending_subtree_in_other_queues(
    redis_url: str, queue_name: str, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    parents = Tasks(queue_name, url=redis_url)
    kids = Tasks("t-" + uuid.uuid4().hex[:12], url=redis_url)
    ran: list[str] = []

    @parents.task
    def top(data: None) -> None:
        ran.append("top")

    @kids.task
    def leaf(data: int) -> None:
        ran.append(f"leaf{data}")

    # top <- leaf x 450 (other queue) and top <- top (this queue) <- leaf (other queue)
    grandchild = leaf.node(-1, id="deep")
    fan = [leaf.node(n) for n in range(450)]
    done = sync_queue.enqueue_flow(
        top.node(None, children=[*fan, top.node(None, children=[grandchild])])
    )
    assert sync_queue.cancel(done.id)
    worker_runner.start(parents, **FAST)  # its courier cancels the subtree, 200 at a time
    with Queue(kids.queue_name, url=redis_url) as other:
        wait_until(lambda: sum(other.counts().values()) == 0, timeout=20)
        assert other.get("deep") is None
    worker_runner.start(kids, **FAST)
    assert sync_queue.get(done.children[-1].id) is None
    assert sync_queue.client.xlen(sync_queue.core.keys.outbox) == 0 or wait_until(
        lambda: sync_queue.client.xlen(sync_queue.core.keys.outbox) == 0
    )
    assert ran == []


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_a_step_job_adds_children_and_gives_up_its_slot_until_they_settle(
    redis_url: str, queue_name: str, sync_queue: Queue, worker_runner: WorkerRunner, kind: str
) -> None:
    tasks = Tasks(queue_name, url=redis_url)
    other = Tasks("t-" + uuid.uuid4().hex[:12], url=redis_url)
    runs: list[int] = []

    @other.task
    async def double(n: int) -> int:
        return 2 * n

    def plan(n: int) -> list[Any]:
        return [double.node(i) for i in range(n)] + [tasks.handlers["echo"].node(100)]

    @tasks.task
    async def echo(n: int) -> int:
        return n

    if kind == "async":

        @tasks.task(name="fan")
        async def fan_async(n: int) -> int:
            job = current_job()
            runs.append(job.attempt)
            done = await job.children_async()
            if not done.results:
                await job.add_children_async(plan(n))
                await job.wait_for_children_async()
            return sum(done.results.values())
    else:

        @tasks.task(name="fan")
        def fan_sync(n: int) -> int:
            job = current_job()
            runs.append(job.attempt)
            done = job.children()
            if not done.results:
                job.add_children(plan(n))
                job.wait_for_children()
            return sum(done.results.values())

    job = sync_queue.enqueue("fan", 3)
    worker_runner.start(tasks, concurrency=1, **FAST)  # one slot: the children need it
    wait_until(lambda: sync_queue.get(job.id).state is JobState.WAITING_CHILDREN)
    worker_runner.start(other, **FAST)
    assert sync_queue.wait_result(job.id, timeout=20) == 0 + 2 + 4 + 100
    assert runs == [1, 1]  # the wait gave its attempt back: no failure, no stall
    record = sync_queue.get(job.id)
    assert (record.attempts, record.failures, record.stalls) == (1, 0, 0)
    assert sync_queue.children_counts(job.id).processed == 4


def test_a_cross_queue_hand_off_is_carried_at_once_not_at_the_next_beat(
    redis_url: str, queue_name: str, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    """With the default 30 s lease a beat is 10 s apart: the worker that completed the child
    drains its outbox right after the acknowledgement instead."""
    parents, kids = (
        Tasks(queue_name, url=redis_url),
        Tasks("t-" + uuid.uuid4().hex[:12], url=redis_url),
    )

    @parents.task
    async def top(data: None) -> int:
        return sum((await current_job().children_async()).results.values())

    @kids.task
    async def one(data: None) -> int:
        return 1

    for t in (parents, kids):
        worker_runner.start(t)  # default lease and heartbeat
    done = sync_queue.enqueue_flow(top.node(None, children=[one.node(None), one.node(None)]))
    started = time.monotonic()
    assert sync_queue.wait_result(done.id, timeout=30) == 2
    assert time.monotonic() - started < 8  # not a beat (10 s) away


def test_a_burst_worker_runs_the_parents_its_last_children_release(
    redis_url: str, queue_name: str, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task
    async def noop(data: None) -> None:
        return None

    done = sync_queue.enqueue_flow(noop.node(None, children=[noop.node(None) for _ in range(30)]))
    handle = worker_runner.start(tasks, burst=True, concurrency=8)
    handle.thread.join(30)
    assert not handle.thread.is_alive()
    job = sync_queue.get(done.id)
    assert job is not None and job.state is JobState.COMPLETED


def test_burst_workers_finish_a_flow_across_queues(
    redis_url: str, queue_name: str, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    """The children's burst worker carries its last hand-offs before it exits; then the
    parents' burst worker runs the parent."""
    parents, kids = (
        Tasks(queue_name, url=redis_url),
        Tasks("t-" + uuid.uuid4().hex[:12], url=redis_url),
    )

    @parents.task
    async def top(data: None) -> int:
        return len((await current_job().children_async()).results)

    @kids.task
    async def leaf(data: None) -> None:
        return None

    done = sync_queue.enqueue_flow(top.node(None, children=[leaf.node(None) for _ in range(20)]))
    for tasks in (kids, parents):
        handle = worker_runner.start(tasks, burst=True, idle_wait=1.0)
        handle.thread.join(30)
        assert not handle.thread.is_alive()
    assert sync_queue.get(done.id).result == 20

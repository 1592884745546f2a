"""enqueue_flow and a flow's inspection, through both clients (protocol §14)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from conveyor import FlowJob, JobState, Queue
from conveyor.errors import UnknownOptionError, ValidationError


@pytest.fixture
def other(redis_url: str) -> Iterator[Queue]:
    with Queue("t-" + uuid.uuid4().hex[:12], url=redis_url) as q:
        yield q


def test_a_tree_across_queues_is_written_parents_first(queue: Any, other: Queue) -> None:
    tree = FlowJob(
        task="report",
        data={"month": 11},
        options={"priority": "high", "id": "root"},
        children=[
            FlowJob(task="sum", data=1, options={"id": "a"}),
            FlowJob(
                task="sum", data=2, queue=other.name, on_fail="ignore", options={"id": "b"},
                children=[FlowJob(task="fetch", data=3, options={"id": "b1"})],
            ),
        ],
    )  # fmt: skip
    done = queue.enqueue_flow(tree)
    assert (done.id, done.queue, done.outcome, done.state) == (
        "root", queue.name, "created", JobState.WAITING_CHILDREN,
    )  # fmt: skip
    a, b = done.children
    assert (a.queue, a.state, b.queue, b.state) == (
        queue.name, JobState.WAITING, other.name, JobState.WAITING_CHILDREN,
    )  # fmt: skip
    (b1,) = b.children
    assert (b1.queue, b1.state) == (other.name, JobState.WAITING)  # a child's queue by default
    assert queue.get("root").state is JobState.WAITING_CHILDREN
    assert other.get("b").state is JobState.WAITING_CHILDREN
    counts = queue.children_counts("root")
    assert (counts.total, counts.pending, counts.processed) == (2, 2, 0)
    node = queue.flow("root")
    assert node.job is not None and node.job.priority == 0
    assert [c.ref for c in node.children] == [f"{queue.name}/a", f"{other.name}/b"]
    assert [c.job.state for c in node.children if c.job] == [
        JobState.WAITING, JobState.WAITING_CHILDREN
    ]  # fmt: skip
    assert node.children[1].counts.pending == 1
    assert queue.flow("root", offset=1, limit=1).children[0].ref == f"{other.name}/b"
    # sending the same tree again (same ids) changes nothing
    again = queue.enqueue_flow(tree)
    assert (again.outcome, again.children[1].children[0].outcome) == ("exists", "exists")
    assert queue.children_counts("root").total == 2


def test_generated_ids_and_the_root_s_result_ttl_reach_every_node(queue: Any) -> None:
    done = queue.enqueue_flow(
        FlowJob(task="p", options={"result_ttl": 30}, children=[FlowJob(task="c")])
    )
    (child,) = done.children
    assert done.id != child.id
    assert queue.get(child.id).result_ttl == 30


@pytest.mark.parametrize(
    ("tree", "error"),
    [
        (FlowJob(task="p", on_fail="ignore"), ValidationError),
        (FlowJob(task="p", children=[FlowJob(task="c", on_fail="explode")]), ValidationError),  # type: ignore[arg-type]
        (FlowJob(task="p", children=[FlowJob(task="c", options={"id": "x"}),
                                     FlowJob(task="c", options={"id": "x"})]), ValidationError),
        (FlowJob(task="p", children=[FlowJob(task="c", queue="a b")]), ValidationError),
        (FlowJob(task="p", options={"update_data": False}), UnknownOptionError),
    ],
)  # fmt: skip
def test_a_bad_tree_writes_nothing(
    queue: Any, redis_client: redis.Redis, tree: FlowJob, error: type[Exception]
) -> None:
    with pytest.raises(error):
        queue.enqueue_flow(tree)
    assert redis_client.keys(f"*{queue.name}*job:*") == []


def test_a_child_whose_id_is_in_use_fails_its_parent(queue: Any) -> None:
    queue.enqueue("t", None, id="taken")
    done = queue.enqueue_flow(
        FlowJob(task="p", children=[FlowJob(task="c", options={"id": "taken"})])
    )
    assert done.children[0].outcome == "conflict"
    parent = queue.get(done.id)
    assert parent.state is JobState.FAILED and "already in use" in (parent.error or "")


def test_a_tree_in_one_queue_is_one_call_and_crossing_queues_orders_the_calls() -> None:
    from conveyor.client.flows import FlowPlan
    from conveyor.options import JobDefaults, SpecBuilder

    specs = SpecBuilder(JobDefaults(), 1 << 20)

    def plan(tree: FlowJob) -> list[tuple[str, int]]:
        built = FlowPlan([tree], queue="a", prefix="p", specs=specs, events_maxlen=10)
        return [(c.queue, len(c.nodes)) for c in built.calls]

    chain = FlowJob(task="t", children=[FlowJob(task="t", children=[FlowJob(task="t")])])
    assert plan(chain) == [("a", 3)]
    mixed = FlowJob(
        task="t",
        children=[FlowJob(task="t", queue="b", children=[FlowJob(task="t", queue="a")]),
                  FlowJob(task="t")],
    )  # fmt: skip
    # depth 1 holds queues a and b: the a-child at depth 2 must wait for its b-parent
    assert plan(mixed) == [("a", 1), ("b", 1), ("a", 1), ("a", 1)]


def test_parents_waiting_for_children_are_counted_and_listed(queue: Any) -> None:
    done = queue.enqueue_flow(FlowJob(task="p", children=[FlowJob(task="c")]))
    assert queue.counts()[JobState.WAITING_CHILDREN] == 1
    assert queue.job_ids(JobState.WAITING_CHILDREN) == [done.id]


def test_a_node_s_record_names_its_parent_policy_and_children(queue: Any) -> None:
    done = queue.enqueue_flow(
        FlowJob(task="p", children=[FlowJob(task="c", on_fail="ignore"), FlowJob(task="c")])
    )
    parent, child = queue.get(done.id), queue.get(done.children[0].id)
    assert (parent.parent, parent.children) == (None, 2)
    assert (child.parent, child.on_fail, child.children) == (done.ref, "ignore", 0)


def test_the_cli_shows_a_flow_s_node_and_a_page_of_its_children(
    redis_url: str, queue_name: str, other: Queue
) -> None:
    import json

    from click.testing import CliRunner

    from conveyor.integrations.cli import main

    with Queue(queue_name, url=redis_url) as queue:
        done = queue.enqueue_flow(
            FlowJob(task="p", options={"id": "root"},
                    children=[FlowJob(task="c", options={"id": f"c{i}"}) for i in range(3)]
                    + [FlowJob(task="c", queue=other.name, options={"id": "far"})])
        )  # fmt: skip
    shown = CliRunner().invoke(
        main, ["flow", queue_name, done.id, "--url", redis_url, "--offset", "2", "--limit", "5"]
    )
    assert shown.exit_code == 0, shown.output
    tree = json.loads(shown.output)
    assert (tree["ref"], tree["state"]) == (f"{queue_name}/root", "waiting_children")
    assert tree["children"] == {"total": 4, "pending": 4, "processed": 0, "ignored": 0, "failed": 0}
    assert [(c["ref"], c["state"]) for c in tree["page"]] == [
        (f"{queue_name}/c2", "waiting"), (f"{other.name}/far", "waiting")
    ]  # fmt: skip


def test_cancel_abort_and_remove_carry_a_flow_down_every_queue_before_they_return(
    queue: Any, other: Queue, redis_url: str
) -> None:
    """No worker runs: the client carries the cancellation and the hand-offs
    itself (protocol §14.9), through either client."""
    third = f"{other.name}-3"

    def tree(root: str) -> FlowJob:
        return FlowJob(task="p", options={"id": root}, children=[
            FlowJob(task="m", queue=other.name, children=[
                FlowJob(task="l", queue=third) for _ in range(3)]) for _ in range(4)
        ])  # fmt: skip

    queue.enqueue_flow(tree("r1"))
    assert queue.cancel("r1") is True
    queue.enqueue_flow(tree("r2"))
    assert queue.remove("r2") == "removed"
    with Queue(queue.name, url=redis_url) as first, Queue(third, url=redis_url) as last:
        for q in (first, other, last):
            assert sum(q.counts().values()) == 0
            assert q.client.xlen(q.core.keys.outbox) == 0
    leaf = queue.enqueue_flow(
        FlowJob(task="p", children=[FlowJob(task="l", queue=other.name, options={"id": "l1"})])
    )
    assert other.abort("l1") == "cancelled"
    assert queue.get(leaf.id).state is JobState.FAILED


def test_purging_flow_children_counts_them_and_tells_their_parents(
    queue: Any, other: Queue
) -> None:
    done = other.enqueue_flow(
        FlowJob(task="p", children=[FlowJob(task="c", queue=queue.name) for _ in range(5)])
    )
    assert queue.purge(JobState.WAITING, batch=2) == 5
    assert sum(queue.counts().values()) == 0
    parent = other.get(done.id)
    assert parent.state is JobState.FAILED and "CancelledError" in (parent.error or "")

"""enqueue_flow's rules, through both clients (protocol §14.2, §14.3): one id per
parent, typed flow errors, every node option applied or refused, the root's
id and dedup key."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from conveyor import FlowJob, JobState, Queue
from conveyor.errors import (
    ChildFailedError,
    DuplicateChildError,
    FlowConflictError,
    JobCancelledError,
    JobFailedError,
    failure_of,
)


@pytest.fixture
def other(redis_url: str) -> Iterator[Queue]:
    with Queue("t-" + uuid.uuid4().hex[:12], url=redis_url) as q:
        yield q


def _nothing_written(client: redis.Redis, *queues: str) -> None:
    for name in queues:
        assert client.keys(f"*{{{name}}}*") == [], name


# --- one id per parent --------------------------------------------------------------


@pytest.mark.parametrize("where", ["same queue", "other queue", "deeper, other queue"])
def test_one_id_twice_under_a_parent_refuses_the_whole_flow(
    queue: Any, other: Queue, redis_client: redis.Redis, where: str
) -> None:
    second = {"same queue": None, "other queue": other.name}.get(where, other.name)
    twins = [
        FlowJob(task="c", options={"id": "same"}),
        FlowJob(task="c", queue=second, options={"id": "same"}),
    ]
    tree = FlowJob(task="p", options={"id": "root"}, children=twins)
    if where.startswith("deeper"):  # under a parent in `other`, twins in both queues
        twins[0] = FlowJob(task="c", queue=queue.name, options={"id": "same"})
        tree = FlowJob(task="top", children=[FlowJob(task="p", queue=other.name, children=twins)])
    with pytest.raises(DuplicateChildError):
        queue.enqueue_flow(tree)
    _nothing_written(redis_client, queue.name, other.name)


def test_children_a_running_job_adds_at_once_may_not_share_an_id() -> None:
    from conveyor.client.flows import FlowPlan
    from conveyor.options import JobDefaults, SpecBuilder

    twins = [FlowJob(task="c", queue=q, options={"id": "x"}) for q in ("a", "b")]
    with pytest.raises(DuplicateChildError):
        FlowPlan(twins, queue="a", prefix="p", specs=SpecBuilder(JobDefaults(), 1 << 20),
                 events_maxlen=10, parent="a/running")  # fmt: skip


def test_one_id_under_two_parents_or_in_two_levels_is_fine(queue: Any, other: Queue) -> None:
    done = queue.enqueue_flow(
        FlowJob(task="p", options={"id": "x"}, children=[
            FlowJob(task="c", options={"id": "a"}),
            FlowJob(task="c", queue=other.name, options={"id": "b"},
                    children=[FlowJob(task="c", queue=other.name, options={"id": "a"})]),
            FlowJob(task="c", queue=other.name, options={"id": "x"}),
        ])
    )  # fmt: skip
    assert [c.outcome for c in done.children] == ["created"] * 3
    assert done.children[1].children[0].ref == f"{other.name}/a"
    assert queue.children_counts("x").total == 3


# --- typed flow errors --------------------------------------------------------------


def test_a_parent_failed_by_a_conflicting_child_is_typed(queue: Any) -> None:
    queue.enqueue("t", None, id="taken")
    done = queue.enqueue_flow(
        FlowJob(task="p", children=[FlowJob(task="c", options={"id": "taken"})])
    )
    parent = queue.get(done.id)
    assert (parent.state, parent.error_type) == (JobState.FAILED, "ChildFailedError")
    with pytest.raises(ChildFailedError) as caught:
        queue.wait_result(done.id, timeout=5)
    assert caught.value.child == f"{queue.name}/taken"
    assert isinstance(caught.value.cause, FlowConflictError)
    assert caught.value.cause.job_id == "taken"


def test_a_parent_failed_by_a_cancelled_child_is_typed(queue: Any) -> None:
    done = queue.enqueue_flow(FlowJob(task="p", children=[FlowJob(task="c"), FlowJob(task="c")]))
    assert queue.cancel(done.children[1].id)
    with pytest.raises(ChildFailedError) as caught:
        queue.wait_result(done.id, timeout=5)
    assert isinstance(caught.value.cause, JobCancelledError)
    assert caught.value.child == done.children[1].ref
    assert queue.get(done.id).error_type == "ChildFailedError"


def test_failure_of_reads_nested_causes_and_unknown_types() -> None:
    text = "ChildFailedError: child q/a failed: ChildFailedError: child r/b failed: ValueError: x"
    err = failure_of("p", text)
    assert isinstance(err, ChildFailedError) and err.child == "q/a"
    assert isinstance(err.cause, ChildFailedError) and err.cause.child == "r/b"
    assert type(err.cause.cause) is JobFailedError and err.cause.cause.error_type == "ValueError"
    assert (err.cause.cause.job_id, err.cause.cause.cause) == ("b", None)
    assert failure_of("j", "boom with no type").error_type is None
    assert isinstance(failure_of("j", "CancelledError: an older record"), JobCancelledError)


# --- every node option is applied or refused ----------------------------------------


def test_headers_expires_and_concurrency_keys_reach_every_node(
    queue: Any, other: Queue, redis_client: redis.Redis
) -> None:
    from conveyor.protocol.keys import QueueKeys

    opts = {"headers": {"trace": "t-1"}, "expires": 600, "concurrency_keys": ["api"]}
    done = queue.enqueue_flow(
        FlowJob(task="p", options=opts, children=[
            FlowJob(task="c", queue=other.name, options=opts,
                    children=[FlowJob(task="g", queue=other.name, options=opts)]),
            FlowJob(task="c", options=opts),
        ])
    )  # fmt: skip
    nodes = [(queue, done.id), (other, done.children[0].id),
             (other, done.children[0].children[0].id), (queue, done.children[1].id)]  # fmt: skip
    for owner, job_id in nodes:
        record = redis_client.hgetall(QueueKeys(other.core.keys.prefix, owner.name).job(job_id))
        assert record[b"headers"] == b'{"trace":"t-1"}', job_id
        assert record[b"ckeys"] == b"api", job_id
        assert owner.get(job_id).expires_at is not None, job_id


@pytest.mark.parametrize(
    ("on", "options"),
    [
        ("child", {"dedup": "k"}),
        ("child", {"dedup": "k", "dedup_ttl": 5}),
        ("child", {"debounce": 5, "dedup": "k"}),
        ("root", {"debounce": 5, "dedup": "k"}),
    ],
)
def test_dedup_on_a_child_and_debounce_anywhere_are_refused(
    queue: Any, other: Queue, redis_client: redis.Redis, on: str, options: dict[str, Any]
) -> None:
    from conveyor.errors import UnknownOptionError

    child = FlowJob(task="c", queue=other.name, options=options if on == "child" else {})
    tree = FlowJob(task="p", options=options if on == "root" else {}, children=[child])
    with pytest.raises(UnknownOptionError):
        queue.enqueue_flow(tree)
    _nothing_written(redis_client, queue.name, other.name)


# --- the root's id and dedup key ----------------------------------------------------


def _tree(other: Queue, **root_options: Any) -> FlowJob:
    return FlowJob(task="report", options=root_options, children=[
        FlowJob(task="sum", children=[FlowJob(task="fetch")]),
        FlowJob(task="sum", queue=other.name, children=[FlowJob(task="fetch")]),
    ])  # fmt: skip


def _job_count(client: redis.Redis, *queues: str) -> int:
    return sum(len(client.keys(f"*{{{name}}}:job:*")) for name in queues)


def test_a_second_trigger_of_a_deduplicated_flow_writes_nothing(
    queue: Any, other: Queue, redis_client: redis.Redis
) -> None:
    first = queue.enqueue_flow(_tree(other, dedup="nightly"))
    assert first.outcome == "created" and _job_count(redis_client, queue.name, other.name) == 5
    again = queue.enqueue_flow(_tree(other, dedup="nightly"))
    assert (again.outcome, again.id, again.state) == (
        "deduplicated", first.id, JobState.WAITING_CHILDREN,
    )  # fmt: skip
    assert [c.outcome for c in again.children] == ["skipped", "skipped"]
    assert [c.children[0].outcome for c in again.children] == ["skipped", "skipped"]
    assert _job_count(redis_client, queue.name, other.name) == 5
    # once the standing root is gone (cancelled here), the key frees up
    assert queue.cancel(first.id)
    third = queue.enqueue_flow(_tree(other, dedup="nightly"))
    assert third.outcome == "created" and third.id != first.id


def test_a_throttled_flow_stands_aside_while_its_key_lives(queue: Any, other: Queue) -> None:
    first = queue.enqueue_flow(_tree(other, dedup="hourly", dedup_ttl=60))
    assert queue.cancel(first.id)  # whatever became of the job: throttled
    again = queue.enqueue_flow(_tree(other, dedup="hourly", dedup_ttl=60))
    assert (again.outcome, again.id, again.state) == ("deduplicated", first.id, None)


def test_a_root_whose_id_is_a_plain_job_writes_no_child(
    queue: Any, other: Queue, redis_client: redis.Redis
) -> None:
    queue.enqueue("report", None, id="r1")
    done = queue.enqueue_flow(_tree(other, id="r1"))
    assert (done.outcome, done.state) == ("exists", JobState.WAITING)
    assert [c.outcome for c in done.children] == ["skipped", "skipped"]
    assert _job_count(redis_client, queue.name, other.name) == 1


def test_a_re_sent_flow_completes_what_an_interrupted_send_left(
    redis_url: str, queue_name: str, other: Queue, redis_client: redis.Redis
) -> None:
    from conveyor.client.flows import FlowPlan

    with Queue(queue_name, url=redis_url) as queue:
        tree = FlowJob(task="p", options={"id": "root"}, children=[
            FlowJob(task="c", options={"id": "a"}),
            FlowJob(task="c", queue=other.name, options={"id": "b"}),
        ])  # fmt: skip
        core = queue.core
        plan = FlowPlan([tree], queue=queue_name, prefix=core.keys.prefix, specs=core.specs,
                        events_maxlen=100)  # fmt: skip
        first = plan.calls[0]  # the producer dies after its first call
        plan.record(first, queue._send_enqueues([plan.call_for(first)])[0])
        assert _job_count(redis_client, queue_name, other.name) == 1
        done = queue.enqueue_flow(tree)
        assert [c.outcome for c in done.children] == ["created", "created"]
        assert done.outcome == "exists" and other.get("b").parent == f"{queue_name}/root"


def test_under_a_conflicting_child_nothing_is_written(
    queue: Any, other: Queue, redis_client: redis.Redis
) -> None:
    queue.enqueue("t", None, id="taken")
    other.enqueue("t", None, id="far")
    done = queue.enqueue_flow(
        FlowJob(task="p", children=[
            FlowJob(task="c", options={"id": "taken"}, children=[FlowJob(task="g")]),
            FlowJob(task="c", queue=other.name, options={"id": "far"},
                    children=[FlowJob(task="g", queue=queue.name)]),
        ])
    )  # fmt: skip
    assert [c.outcome for c in done.children] == ["conflict", "conflict"]
    assert [c.children[0].outcome for c in done.children] == ["skipped", "skipped"]
    assert _job_count(redis_client, queue.name, other.name) == 3  # the parent and the two

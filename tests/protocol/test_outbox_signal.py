"""Every script that may write to the outbox says so in its reply, so that
its caller drains at once (protocol §14.5, "The outbox signal"): complete and
cancel answer 2, reap's fifth element is 1, and fail, remove, abort,
flow_settle and flow_wait mark their word with `+`. A call that wrote nothing
there answers as before."""

from __future__ import annotations

import time
import uuid

import pytest

from conveyor.protocol import flows, ops

from .flowkit import add, node, outbox, ref, settle
from .harness import MAXLEN, Proto, text

LEASE_MS = 40
PAST_LEASE = 0.06


@pytest.fixture
def other(q: Proto) -> Proto:
    return Proto(q.r, "p-" + uuid.uuid4().hex[:16])


@pytest.fixture
def third(q: Proto) -> Proto:
    return Proto(q.r, "p-" + uuid.uuid4().hex[:16])


def raw_fail(q: Proto, job_id: str, token: str, *, permanent: bool = True) -> str:
    item = ops.FailItem(job_id, token, "boom", permanent, 0, 0.0)  # a retry: at once
    (reply,) = q.run(ops.fail(q.keys, [item], events_maxlen=MAXLEN))
    return text(reply)


def child_of(q: Proto, parent: Proto, job_id: str = "c", **options: object) -> None:
    """A parent `p` in `parent` with one child `job_id` in `q`."""
    add(parent, node(parent, "p", children=(ref(q, job_id),)))
    add(q, node(q, job_id, parent=ref(parent, "p"), **options))


def test_fail_marks_a_final_failure_whose_hand_off_went_to_the_outbox(
    q: Proto, other: Proto
) -> None:
    child_of(q, other, max_failures=2)
    assert q.claimed_ids(token="t1") == ["c"]
    assert raw_fail(q, "c", "t1", permanent=False) == "retried"  # no hand-off yet
    assert q.claimed_ids(token="t2") == ["c"]
    assert raw_fail(q, "c", "t2", permanent=False) == "failed+"
    assert [h.outcome for h in outbox(q)] == ["failed"]
    assert ops.decode_fail([b"failed+"]) == ["failed"] and ops.fail_handed_off([b"failed+"])


def test_fail_answers_plain_failed_when_the_parent_is_in_its_queue(q: Proto) -> None:
    child_of(q, q)
    assert q.claimed_ids(token="t") == ["c"]
    assert raw_fail(q, "c", "t") == "failed"
    assert q.stored("p")["state"] == "failed" and outbox(q) == []


def test_a_failure_climbing_through_its_own_queue_to_another_is_marked(
    q: Proto, other: Proto
) -> None:
    """c fails p in the same script; p's own hand-off goes to g in another queue."""
    add(other, node(other, "g", children=(ref(q, "p"),)))
    add(q, node(q, "p", parent=ref(other, "g"), children=(ref(q, "c"),)))
    add(q, node(q, "c", parent=ref(q, "p")))
    assert q.claimed_ids(token="t") == ["c"]
    assert raw_fail(q, "c", "t") == "failed+"
    assert [h.parent for h in outbox(q)] == [ref(other, "g")]


def test_reap_tells_of_a_final_stall_handed_to_the_outbox(q: Proto, other: Proto) -> None:
    child_of(q, other, max_stalls=1)
    q.enqueue("plain", max_stalls=1)
    assert sorted(q.claimed_ids(2, token="t", lease_ms=LEASE_MS)) == ["c", "plain"]
    time.sleep(PAST_LEASE)
    raw = q.run(ops.reap(q.keys, batch=100, events_maxlen=MAXLEN))
    assert [int(x) for x in raw[:2]] == [0, 2] and int(raw[4]) == 1
    assert ops.decode_reap(raw).sent
    assert [h.child for h in outbox(q)] == [ref(q, "c")]
    q.start("alone", token="t", lease_ms=LEASE_MS, max_stalls=1)
    time.sleep(PAST_LEASE)
    assert int(q.run(ops.reap(q.keys, batch=100, events_maxlen=MAXLEN))[4]) == 0


def test_cancel_answers_2_when_it_wrote_to_the_outbox(q: Proto, other: Proto) -> None:
    child_of(q, other)
    q.enqueue("plain")
    assert q.cancel("plain") == 1
    assert q.cancel("c") == 2  # its parent is told through the outbox
    assert q.cancel("c") == 0
    # a parent's pending children are cancelled through its own outbox
    assert other.cancel("p") == 2 and [h.op for h in outbox(other)] == ["cancel"]


def test_remove_marks_removed(q: Proto, other: Proto) -> None:
    child_of(q, other)
    q.enqueue("plain")
    assert q.remove("plain") == "removed"
    assert q.remove("c") == "removed+"
    assert ops.word("removed+") == "removed" and ops.marked("removed+")


def test_abort_of_a_waiting_child_tells_its_parent(q: Proto, other: Proto) -> None:
    """Abort cancels a job that has not started exactly as cancel does: a
    flow's child settles as failed, or its parent would wait for ever."""
    child_of(q, other)
    assert q.abort("c") == "cancelled+"
    (entry,) = outbox(q)
    assert (entry.parent, entry.outcome) == (ref(other, "p"), "failed")
    assert entry.payload.startswith("JobCancelledError")
    assert settle(other, [entry]) == ["failed"]
    assert other.stored("p")["state"] == "failed"


def test_abort_of_a_waiting_child_in_its_parents_queue_fails_the_parent(q: Proto) -> None:
    child_of(q, q)
    assert q.abort("c") == "cancelled"
    assert q.stored("p")["state"] == "failed" and outbox(q) == []


def test_flow_settle_marks_a_parent_whose_failure_went_on_to_the_outbox(
    q: Proto, other: Proto, third: Proto
) -> None:
    """c (third) fails p (q), whose own parent g is in `other`."""
    add(other, node(other, "g", children=(ref(q, "p"),)))
    add(q, node(q, "p", parent=ref(other, "g"), children=(ref(third, "c"), ref(third, "d"))))
    add(third, node(third, "c", parent=ref(q, "p")), node(third, "d", parent=ref(q, "p")))
    assert third.claimed_ids(2, token="t") == ["c", "d"]
    assert raw_fail(third, "c", "t") == "failed+"
    assert third.complete_one("d", "t") is True
    call = flows.flow_settle(q.keys, outbox(third), events_maxlen=MAXLEN)
    assert [text(r) for r in q.run(call)] == ["failed+", "recorded"]
    assert [h.parent for h in outbox(q)] == [ref(other, "g")]


def test_flow_wait_marks_a_failed_wait_handed_to_the_outbox(q: Proto, other: Proto) -> None:
    add(other, node(other, "g", children=(ref(q, "s"),)))
    add(q, node(q, "s", parent=ref(other, "g")))
    assert q.claimed_ids(token="tok") == ["s"]
    assert int(q.run(flows.flow_attach(q.keys, "s", "tok", [ref(q, "a")]))) == 1
    add(q, node(q, "a", parent=ref(q, "s")))
    assert q.claimed_ids(token="t2") == ["a"]
    assert raw_fail(q, "a", "t2") == "failed"  # s runs: only recorded
    reply = text(q.run(flows.flow_wait(q.keys, "s", "tok", events_maxlen=MAXLEN)))
    assert reply == "failed+"
    assert [h.parent for h in outbox(q)] == [ref(other, "g")]

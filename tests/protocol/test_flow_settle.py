"""Children settling towards their parents: the same-queue fast path in the
finishing scripts, the outbox and flow_settle (protocol §14.4-14.6)."""

from __future__ import annotations

import time
import uuid

import pytest

from .flowkit import add, deps, fail_one, node, outbox, ref, run_one, settle
from .harness import Proto


@pytest.fixture
def other(q: Proto) -> Proto:
    return Proto(q.r, "p-" + uuid.uuid4().hex[:16])


def test_the_last_child_releases_the_parent_in_the_same_script(q: Proto) -> None:
    add(q, node(q, "p", children=(ref(q, "a"), ref(q, "b"))))
    add(q, node(q, "a", parent=ref(q, "p")), node(q, "b", parent=ref(q, "p")))
    run_one(q, "a", '{"n":1}')
    assert q.stored("p")["state"] == "waiting_children"
    run_one(q, "b", '{"n":2}')
    assert q.stored("p")["state"] == "waiting"
    assert q.members(q.keys.ready) == ["p"]
    assert "p" not in q.members(q.keys.waiting_children)
    d = deps(q, "p")
    assert d["pending"] == [] and d["processed"] == {ref(q, "a"): '{"n":1}', ref(q, "b"): '{"n":2}'}
    assert q.events("children_done") == [{"event": "children_done", "id": "p"}]
    assert outbox(q) == []


def test_a_released_parent_waits_for_its_own_run_at(q: Proto) -> None:
    add(q, node(q, "p", children=(ref(q, "a"),), delay=60), node(q, "a", parent=ref(q, "p")))
    run_one(q, "a")
    assert q.stored("p")["state"] == "delayed"
    assert q.score(q.keys.scheduled, "p") is not None


def test_a_child_in_another_queue_goes_through_the_outbox_once(q: Proto, other: Proto) -> None:
    add(q, node(q, "p", children=(ref(other, "c"),)))
    add(other, node(other, "c", parent=ref(q, "p")))
    run_one(other, "c", '"done"')
    assert q.stored("p")["state"] == "waiting_children"  # not yet: it is in the outbox
    entries = outbox(other)
    assert [(h.parent, h.child, h.outcome, h.payload, h.policy) for h in entries] == [
        (ref(q, "p"), ref(other, "c"), "completed", '"done"', "")
    ]
    assert settle(q, entries) == ["released"]
    assert q.stored("p")["state"] == "waiting"
    # a drainer that died before deleting the entry, or two drainers: nothing twice
    before = (q.snapshot("p"), deps(q, "p"), q.r.xlen(q.keys.events))
    assert settle(q, entries) == ["dup"]
    assert (q.snapshot("p"), deps(q, "p"), q.r.xlen(q.keys.events)) == before


def test_a_hand_off_to_a_missing_parent_is_a_dup(q: Proto, other: Proto) -> None:
    add(other, node(other, "c", parent=ref(q, "gone")))
    run_one(other, "c")
    assert settle(q, outbox(other)) == ["dup"]
    assert q.r.exists(q.keys.job("gone")) == 0


def test_a_failed_child_fails_the_parent_and_the_failure_climbs(q: Proto, other: Proto) -> None:
    # root (q) <- mid (other) <- leaf (other): the leaf's failure fails mid
    # in the same script, mid's failure reaches root through other's outbox
    add(q, node(q, "root", children=(ref(other, "mid"),)))
    add(other, node(other, "mid", parent=ref(q, "root"), children=(ref(other, "leaf"),)))
    add(other, node(other, "leaf", parent=ref(other, "mid")))
    fail_one(other, "leaf", "disk full")
    mid = other.stored("mid")
    assert mid["state"] == "failed"
    assert mid["error"] == f"ChildFailedError: child {ref(other, 'leaf')} failed: disk full"
    assert settle(q, outbox(other)) == ["failed"]
    root = q.stored("root")
    assert root["state"] == "failed" and "disk full" in root["error"]
    assert deps(q, "root")["failed"] == {ref(other, "mid"): mid["error"]}


@pytest.mark.parametrize(
    ("policy", "recorded_in", "state"),
    [("ignore", "ignored", "waiting"), ("remove", None, "waiting"),
     ("continue", "failed", "waiting")],
)  # fmt: skip
def test_failure_policies(q: Proto, policy: str, recorded_in: str | None, state: str) -> None:
    add(q, node(q, "p", children=(ref(q, "a"), ref(q, "b"))))
    add(q, node(q, "a", parent=ref(q, "p"), on_fail=policy), node(q, "b", parent=ref(q, "p")))
    fail_one(q, "a", "nope")
    d = deps(q, "p")
    for name in ("ignored", "failed"):
        assert d[name] == ({ref(q, "a"): "nope"} if name == recorded_in else {})
    if policy == "continue":  # at once, though b is still pending
        assert q.stored("p")["state"] == "waiting" and d["pending"] == [ref(q, "b")]
        return
    assert q.stored("p")["state"] == "waiting_children"
    run_one(q, "b")
    assert q.stored("p")["state"] == state


def test_a_final_stall_settles_the_child(q: Proto) -> None:
    add(q, node(q, "p", children=(ref(q, "a"),)))
    add(q, node(q, "a", parent=ref(q, "p"), on_fail="ignore", max_stalls=1))
    q.claim(lease_ms=1)
    time.sleep(0.01)
    assert q.reap().failed == 1
    assert q.stored("p")["state"] == "waiting"
    assert "StalledError" in deps(q, "p")["ignored"][ref(q, "a")]


def test_a_finished_parent_takes_its_dependency_keys_with_it(q: Proto) -> None:
    add(q, node(q, "p", children=(ref(q, "a"),), result_ttl=0), node(q, "a", parent=ref(q, "p")))
    run_one(q, "a")
    run_one(q, "p")
    assert q.r.exists(q.keys.job("p")) == 0
    for key in (q.keys.children("p"), q.keys.processed("p"), q.keys.pending("p")):
        assert q.r.exists(key) == 0


def test_a_retained_parent_keeps_its_children_as_long_as_itself(q: Proto) -> None:
    add(q, node(q, "p", children=(ref(q, "a"),), result_ttl=60), node(q, "a", parent=ref(q, "p")))
    run_one(q, "a")
    run_one(q, "p")
    record_ttl = q.ttl_ms(q.keys.job("p"))
    assert abs(q.ttl_ms(q.keys.processed("p")) - record_ttl) < 1000
    assert abs(q.ttl_ms(q.keys.children("p")) - record_ttl) < 1000


def test_removing_a_waiting_parent_deletes_its_keys(q: Proto) -> None:
    add(q, node(q, "p", children=(ref(q, "a"),)), node(q, "a", parent=ref(q, "p")))
    assert q.remove("p") == "removed+"  # its pending child is cancelled through the outbox
    assert q.r.exists(q.keys.children("p"), q.keys.pending("p")) == 0
    assert "p" not in q.members(q.keys.waiting_children)
    run_one(q, "a")  # its hand-off finds no parent: nothing happens
    assert q.r.exists(q.keys.job("p")) == 0


def test_cancelling_a_parent_leaves_its_pending_children_to_the_drainers(
    q: Proto, other: Proto
) -> None:
    add(q, node(q, "p", children=(ref(q, "a"), ref(other, "b"))), node(q, "a", parent=ref(q, "p")))
    add(other, node(other, "b", parent=ref(q, "p")))
    run_one(q, "a")  # settled: not to be cancelled
    assert q.cancel("p") == 2  # 2: something went to the outbox
    assert q.r.exists(q.keys.job("p"), q.keys.pending("p"), q.keys.processed("p")) == 0
    assert "p" not in q.members(q.keys.waiting_children)
    assert [m.decode() for m in q.r.smembers(q.keys.cancelling("p"))] == [ref(other, "b")]
    (entry,) = outbox(q)
    assert (entry.op, entry.parent) == ("cancel", ref(q, "p"))
    assert q.events("cancelled") == [{"event": "cancelled", "id": "p"}]


def test_a_cancelled_child_settles_as_failed_by_its_policy(q: Proto) -> None:
    add(q, node(q, "p", children=(ref(q, "a"), ref(q, "b"))))
    add(q, node(q, "a", parent=ref(q, "p"), on_fail="ignore"), node(q, "b", parent=ref(q, "p")))
    assert q.cancel("a") == 1
    assert "CancelledError" in deps(q, "p")["ignored"][ref(q, "a")]
    assert q.remove("b") == "removed"  # under `fail`: the parent fails
    assert "CancelledError" in q.stored("p")["error"]

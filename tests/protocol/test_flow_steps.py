"""flow_attach.lua and flow_wait.lua: the step-job pattern (protocol §14.10)."""

from __future__ import annotations

from conveyor.protocol import flows

from .flowkit import add, deps, node, ref, run_one
from .harness import MAXLEN, Proto, text


def attach(q: Proto, job_id: str, token: str, *refs: str) -> int:
    return int(q.run(flows.flow_attach(q.keys, job_id, token, refs)))


def wait(q: Proto, job_id: str, token: str = "tok") -> str:
    return text(q.run(flows.flow_wait(q.keys, job_id, token, events_maxlen=MAXLEN)))


def test_a_running_job_waits_for_the_children_it_added(q: Proto) -> None:
    q.start("s")
    assert attach(q, "s", "tok", ref(q, "a"), ref(q, "b")) == 2
    assert attach(q, "s", "tok", ref(q, "a")) == 0  # a re-send adds nothing
    add(q, node(q, "a", parent=ref(q, "s")), node(q, "b", parent=ref(q, "s")))
    run_one(q, "a")  # settles while its parent still runs: recorded only
    assert q.stored("s")["state"] == "active"
    assert wait(q, "s") == "waiting_children"
    s = q.stored("s")
    assert (s["state"], s["children"]) == ("waiting_children", "2")
    assert s.get("attempts", "0") == "0"  # given back
    assert q.score(q.keys.active, "s") is None and "s" in q.members(q.keys.waiting_children)
    run_one(q, "b")
    assert q.stored("s")["state"] == "waiting"
    assert deps(q, "s")["pending"] == []


def test_a_job_whose_children_all_settled_runs_again_at_once(q: Proto) -> None:
    q.start("s")
    attach(q, "s", "tok", ref(q, "a"))
    add(q, node(q, "a", parent=ref(q, "s")))
    run_one(q, "a")
    assert wait(q, "s") == "waiting"
    assert q.members(q.keys.ready) == ["s"]
    assert q.events("children_done") == [{"event": "children_done", "id": "s"}]


def test_a_lost_lease_changes_nothing(q: Proto) -> None:
    q.start("s")
    before = q.snapshot("s")
    assert attach(q, "s", "stale", ref(q, "a")) == -1
    assert wait(q, "s", "stale") == "lost"
    assert q.snapshot("s") == before
    assert q.r.exists(q.keys.children("s"), q.keys.pending("s")) == 0


def test_a_child_that_fails_while_its_parent_runs_fails_it_at_its_wait(q: Proto) -> None:
    q.start("s")
    attach(q, "s", "tok", ref(q, "a"), ref(q, "b"))
    add(q, node(q, "a", parent=ref(q, "s")), node(q, "b", parent=ref(q, "s"), on_fail="ignore"))
    assert q.claimed_ids(token="t2") == ["a"]
    assert q.fail("a", "t2", "no disk", permanent=True) == "failed"
    assert q.stored("s")["state"] == "active"  # recorded: the run goes on
    assert wait(q, "s") == "failed"
    s = q.stored("s")
    assert s["state"] == "failed"
    assert s["error"] == f"ChildFailedError: child {ref(q, 'a')} failed: no disk"
    assert q.score(q.keys.active, "s") is None and q.score(q.keys.failed, "s") is not None

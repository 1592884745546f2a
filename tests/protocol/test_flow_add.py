"""flow_add.lua: a tree's nodes, parents in waiting_children (protocol §14.3)."""

from __future__ import annotations

import uuid

from .flowkit import add, deps, node, outbox, ref
from .harness import Proto


def test_a_parent_waits_for_its_children_and_a_leaf_is_placed(q: Proto) -> None:
    kids = (ref(q, "c1"), ref(q, "c2"))
    assert add(q, node(q, "p", children=kids, priority=5)) == [("created", "waiting_children")]
    assert add(
        q, node(q, "c1", parent=ref(q, "p")), node(q, "c2", parent=ref(q, "p"), on_fail="ignore")
    ) == [("created", "waiting"), ("created", "waiting")]
    p = q.stored("p")
    assert (p["state"], p["children"], p["priority"]) == ("waiting_children", "2", "5")
    assert "p" in q.members(q.keys.waiting_children)
    assert q.score(q.keys.ready, "p") is None and q.score(q.keys.scheduled, "p") is None
    assert deps(q, "p")["children"] == list(kids)
    assert deps(q, "p")["pending"] == sorted(kids)
    assert q.stored("c1")["parent"] == ref(q, "p") and "on_fail" not in q.stored("c1")
    assert q.stored("c2")["on_fail"] == "ignore"
    assert q.members(q.keys.ready) == ["c1", "c2"]
    event = {"event": "waiting_children", "id": "p", "children": "2"}
    assert q.events("waiting_children") == [event]


def test_a_resend_changes_nothing(q: Proto) -> None:
    tree = [node(q, "p", children=(ref(q, "c"),)), node(q, "c", parent=ref(q, "p"))]
    add(q, *tree)
    before = (q.snapshot("p", "c"), deps(q, "p"))
    assert add(q, *tree) == [("exists", "waiting_children"), ("exists", "waiting")]
    assert (q.snapshot("p", "c"), deps(q, "p")) == before


def test_an_id_in_use_under_another_parent_fails_the_parent_at_once(q: Proto) -> None:
    q.enqueue("taken")
    add(q, node(q, "p", children=(ref(q, "taken"),)))
    assert add(q, node(q, "taken", parent=ref(q, "p"))) == [("conflict", "waiting")]
    p = q.stored("p")
    assert p["state"] == "failed"
    assert "FlowConflictError: job id taken is already in use" in p["error"]
    assert "p" not in q.members(q.keys.waiting_children)


def test_a_child_in_another_queue_is_added_there(q: Proto) -> None:
    other = Proto(q.r, "p-" + uuid.uuid4().hex[:16])
    add(q, node(q, "p", children=(ref(other, "c"),)))
    assert add(other, node(other, "c", parent=ref(q, "p"))) == [("created", "waiting")]
    assert other.stored("c")["parent"] == ref(q, "p")
    assert outbox(other) == []


def test_a_big_fan_out_is_written_in_chunks(q: Proto) -> None:
    kids = tuple(ref(q, f"c{i}") for i in range(1200))
    add(q, node(q, "p", children=kids))
    assert q.r.zcard(q.keys.children("p")) == 1200
    assert q.r.scard(q.keys.pending("p")) == 1200
    assert q.r.zscore(q.keys.children("p"), ref(q, "c1199")) == 1200


def test_a_delayed_leaf_and_a_delayed_parent_keep_their_due_time(q: Proto) -> None:
    add(q, node(q, "p", children=(ref(q, "c"),), delay=60), node(q, "c", parent=ref(q, "p")))
    now = q.now()
    assert int(q.stored("p")["run_at"]) >= now + 59_000
    assert q.stored("p")["state"] == "waiting_children"


def test_headers_expire_in_and_ckeys_are_stored_on_every_node(q: Proto) -> None:
    opts = {"headers": {"trace": "t"}, "expires": 60, "concurrency_keys": ["api", "db"]}
    add(q, node(q, "p", children=(ref(q, "c"),), **opts), node(q, "c", parent=ref(q, "p"), **opts))
    for job_id in ("p", "c"):
        stored = q.stored(job_id)
        assert (stored["headers"], stored["ckeys"]) == ('{"trace":"t"}', "api,db")
        assert int(stored["expires_at"]) - int(stored["created_at"]) == 60_000


def test_nothing_is_written_under_a_node_that_is_not_open(q: Proto) -> None:
    q.enqueue("taken")
    tree = [
        node(q, "p", children=(ref(q, "taken"), ref(q, "b"))),
        node(q, "taken", parent=ref(q, "p"), on_fail="ignore", children=(ref(q, "g"),)),
        node(q, "g", parent=ref(q, "taken")),
        node(q, "b", parent=ref(q, "p")),
    ]
    assert add(q, *tree) == [
        ("created", "waiting_children"), ("conflict", "waiting"), ("skipped", ""),
        ("created", "waiting"),
    ]  # fmt: skip
    assert q.stored("g") == {}
    # a root that exists and no longer waits for children: its tree is left alone
    assert add(q, node(q, "taken", children=(ref(q, "x"),)), node(q, "x", parent=ref(q, "taken")))[
        1
    ] == ("skipped", "")
    assert q.stored("x") == {}


def test_a_root_stands_for_its_dedup_key_and_a_child_ignores_one(q: Proto) -> None:
    from conveyor.protocol import flows

    from .harness import MAXLEN

    def send(*nodes: flows.FlowNodeArgs) -> list[str]:
        call = flows.flow_add(q.keys, nodes, events_maxlen=MAXLEN)
        return [x.decode() if isinstance(x, bytes) else str(x) for x in q.run(call)]

    first = [node(q, "r1", dedup="k", children=(ref(q, "c1"),)),
             node(q, "c1", parent=ref(q, "r1"), dedup="other")]  # fmt: skip
    assert send(*first) == ["created", "waiting_children", "created", "waiting"]
    assert q.r.get(q.keys.base + "dedup:k") == b"r1" and "dedup" not in q.stored("c1")
    assert q.r.get(q.keys.base + "dedup:other") is None
    second = [node(q, "r2", dedup="k", children=(ref(q, "c2"),)),
              node(q, "c2", parent=ref(q, "r2"))]  # fmt: skip
    assert send(*second) == ["deduplicated", "waiting_children", "skipped", "", "1", "r1"]
    assert q.stored("r2") == q.stored("c2") == {}
    assert q.events("deduplicated") == [
        {"event": "deduplicated", "id": "r1", "dedup": "k", "mode": "simple"}
    ]

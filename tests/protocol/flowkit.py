"""Driving flow_add and flow_settle directly, and reading a parent's keys."""

from __future__ import annotations

from typing import Any

from conveyor.protocol import flows

from .harness import MAXLEN, Proto, text


def node(
    q: Proto,
    job_id: str,
    *,
    parent: str = "",
    on_fail: str = "",
    children: tuple[str, ...] = (),
    task: str = "t",
    data: Any = None,
    **options: Any,
) -> flows.FlowNodeArgs:
    return flows.FlowNodeArgs(q.spec(job_id, task, data, **options), parent, on_fail, children)


def add(q: Proto, *nodes: flows.FlowNodeArgs) -> list[tuple[str, str]]:
    reply = q.run(flows.flow_add(q.keys, nodes, events_maxlen=MAXLEN))
    return flows.decode_flow_add(reply, len(nodes))


def ref(q: Proto, job_id: str) -> str:
    return flows.reference(q.name, job_id)


def outbox(q: Proto) -> list[flows.HandOff]:
    return flows.decode_outbox(q.r.xrange(q.keys.outbox))


def settle(q: Proto, hand_offs: list[flows.HandOff]) -> list[str]:
    call = flows.flow_settle(q.keys, hand_offs, events_maxlen=MAXLEN)
    return flows.decode_flow_settle(q.run(call))


def deps(q: Proto, job_id: str) -> dict[str, Any]:
    k = q.keys
    return {
        "children": [text(m) for m in q.r.zrange(k.children(job_id), 0, -1)],
        "pending": sorted(text(m) for m in q.r.smembers(k.pending(job_id))),
        "processed": {text(a): text(b) for a, b in q.r.hgetall(k.processed(job_id)).items()},
        "ignored": {text(a): text(b) for a, b in q.r.hgetall(k.ignored(job_id)).items()},
        "failed": {text(a): text(b) for a, b in q.r.hgetall(k.children_failed(job_id)).items()},
    }


def run_one(q: Proto, job_id: str, result: str = '"ok"', token: str = "tok") -> None:
    """Claim the next job (it must be `job_id`) and complete it."""
    assert q.claimed_ids(token=token) == [job_id]
    assert q.complete((job_id, token, result)) == [True]


def fail_one(q: Proto, job_id: str, error: str = "boom", token: str = "tok") -> None:
    assert q.claimed_ids(token=token) == [job_id]
    assert q.fail(job_id, token, error, permanent=True) == "failed"


__all__ = ["add", "deps", "fail_one", "node", "outbox", "ref", "run_one", "settle"]

"""Pure operations of flows (docs/protocol.md §14): build the calls of
flow_add and flow_settle, read outbox entries, decode replies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from conveyor.protocol.keys import QueueKeys
from conveyor.protocol.ops import Arg, Call, JobSpec, text, word

# ARGV entries per node of flow_add: id, task, data, idx, opts, parent, on_fail, children.
FLOW_ADD_ARITY = 8
SETTLE_ARITY = 5  # parent id, child reference, outcome, payload, policy
POLICIES = ("fail", "ignore", "remove", "continue")


def reference(queue: str, job_id: str) -> str:
    """A node's name across queues: `<queue>/<id>` (a queue name holds no `/`)."""
    return f"{queue}/{job_id}"


def split_reference(ref: str) -> tuple[str, str]:
    queue, _, job_id = ref.partition("/")
    return queue, job_id


@dataclass(frozen=True, slots=True)
class FlowNodeArgs:
    """One node as flow_add takes it."""

    spec: JobSpec
    parent: str  # the parent's reference, '' for a root
    on_fail: str  # '' for the default, fail
    children: tuple[str, ...]  # child references

    def argv(self) -> tuple[Arg, ...]:
        spec = self.spec
        index = "\n".join(f"{f}:{v}" for f, v in spec.index) if spec.index else ""
        return (
            spec.id, spec.task, spec.data, index, spec.options(), self.parent, self.on_fail,
            "\n".join(self.children),
        )  # fmt: skip


def flow_add(keys: QueueKeys, nodes: Sequence[FlowNodeArgs], *, events_maxlen: int) -> Call:
    args: list[Arg] = [events_maxlen, FLOW_ADD_ARITY]
    for node in nodes:
        args.extend(node.argv())
    return Call(
        "flow_add",
        (keys.base, keys.meta, keys.ready, keys.scheduled, keys.marker, keys.events,
         keys.completed, keys.failed, keys.waiting_children),
        tuple(args),
    )  # fmt: skip


def decode_flow_add(reply: Sequence[Any], nodes: int) -> list[tuple[str, str]]:
    """(outcome, state) per node of a call of `nodes` nodes: outcome created |
    exists | conflict | deduplicated | skipped."""
    return [(text(reply[i]), text(reply[i + 1])) for i in range(0, 2 * nodes, 2)]


def decode_flow_standing(reply: Sequence[Any], nodes: int) -> dict[int, str]:
    """Position in the call (0-based) -> the standing job's id, for each
    deduplicated root (§16.3)."""
    extra = reply[2 * nodes :]
    return {int(extra[i]) - 1: text(extra[i + 1]) for i in range(0, len(extra), 2)}


@dataclass(frozen=True, slots=True)
class HandOff:
    """One outbox entry: a child's settlement on its way to its parent, or
    (op `cancel`) a cancelled parent of this queue whose children are to be
    cancelled."""

    entry_id: str
    parent: str  # reference
    child: str  # reference
    outcome: str  # completed | failed
    payload: str
    policy: str
    op: str = ""  # '' (a hand-off) | cancel


def decode_outbox(entries: Sequence[Any]) -> list[HandOff]:
    """XRANGE outbox output: [(entry id, {field: value}), ...] or flat pairs."""
    out = []
    for entry_id, raw in entries:
        if isinstance(raw, dict):
            f = {text(k): text(v) for k, v in raw.items()}
        else:
            f = {text(raw[i]): text(raw[i + 1]) for i in range(0, len(raw), 2)}
        out.append(
            HandOff(
                text(entry_id), f.get("parent", ""), f.get("child", ""), f.get("outcome", ""),
                f.get("payload", ""), f.get("policy", ""), f.get("op", ""),
            )
        )  # fmt: skip
    return out


def flow_settle(keys: QueueKeys, hand_offs: Sequence[HandOff], *, events_maxlen: int) -> Call:
    """Apply hand-offs whose parents are all in the queue of `keys`."""
    args: list[Arg] = [events_maxlen]
    for h in hand_offs:
        args.extend((split_reference(h.parent)[1], h.child, h.outcome, h.payload, h.policy))
    return Call(
        "flow_settle",
        (keys.base, keys.ready, keys.scheduled, keys.marker, keys.events, keys.completed,
         keys.failed, keys.waiting_children, keys.blocked),
        tuple(args),
    )  # fmt: skip


def decode_flow_settle(reply: Sequence[Any]) -> list[str]:
    """Per hand-off: dup | recorded | released | failed (its outbox mark,
    a parent's own hand-off written to its queue's outbox, dropped)."""
    return [word(x) for x in reply]


def flow_attach(keys: QueueKeys, job_id: str, token: str, refs: Sequence[str]) -> Call:
    """A running job adds children (references) to itself, before they are written."""
    return Call("flow_attach", (keys.base,), (job_id, token, *refs))


def flow_wait(keys: QueueKeys, job_id: str, token: str, *, events_maxlen: int) -> Call:
    """A running job gives up its lease until its children have settled."""
    return Call(
        "flow_wait",
        (keys.base, keys.active, keys.ready, keys.scheduled, keys.marker, keys.events,
         keys.waiting_children),
        (job_id, token, events_maxlen),
    )  # fmt: skip

"""Flows without I/O: a tree of jobs planned into flow_add calls, and the
readers of a parent's children (docs/protocol.md §14). `Queue` and
`AsyncQueue` add the lines that talk to Redis."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from conveyor import serializers
from conveyor.errors import DuplicateChildError, UnknownOptionError, ValidationError
from conveyor.job import Job, JobState, job_from_hash
from conveyor.options import SpecBuilder, check_name
from conveyor.protocol import flows, ops
from conveyor.protocol.keys import QueueKeys

FailurePolicy = Literal["fail", "ignore", "remove", "continue"]
# A tree deeper than this is refused: a failure climbs it one level per step.
MAX_DEPTH = 64
# Options a flow node may not take: a node is created once, never upserted
# (a root whose id exists is `exists`, its tree left as it is).
_UPSERT_OPTIONS = frozenset(
    {"update_data", "update_run_at", "update_max_failures", "update_max_stalls",
     "update_min_backoff", "update_max_backoff", "reset_counts", "debounce"}
)  # fmt: skip
# Options only a root may take: a child stands for no dedup key (it would
# not be created, and its parent would wait for a job that is not its child).
_ROOT_OPTIONS = frozenset({"dedup", "dedup_ttl"})


@dataclass(frozen=True, kw_only=True, slots=True)
class FlowJob:
    """One node of a flow: a job, the queue it runs in (None: its parent's
    queue; for the root, the queue the flow is enqueued through), what its
    failure does to its parent, and its children, which all settle before
    it runs. `options` are enqueue's (id, delay, priority, result_ttl,
    headers, expires, concurrency_keys, ...), except the upsert rules and
    debounce; `dedup` and `dedup_ttl` on the root only."""

    task: str
    data: Any = None
    queue: str | None = None
    on_fail: FailurePolicy = "fail"
    children: Sequence[FlowJob] = ()
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FlowEnqueued:
    """What enqueue_flow did to one node, and to its children.

    `outcome`: created; exists (the id exists with this parent: the same
    tree sent again); conflict (the id was in use elsewhere: the parent was
    told the child failed); deduplicated (a root whose dedup key stands for
    another job, whose `id` and `state` these are, None once it is gone); or
    skipped (nothing written, not looked at: a node under one that was
    not created and is not waiting for children). Nothing is written under a
    node that is not created or waiting for children."""

    id: str
    queue: str
    outcome: str
    state: JobState | None
    children: tuple[FlowEnqueued, ...] = ()

    @property
    def ref(self) -> str:
        return flows.reference(self.queue, self.id)


@dataclass(slots=True, eq=False)
class _Node:
    queue: str
    args: flows.FlowNodeArgs
    depth: int
    children: list[_Node]
    parent: _Node | None = None
    outcome: tuple[str, str] = ("skipped", "")
    standing: str | None = None  # a deduplicated root: the job standing for its key

    @property
    def open(self) -> bool:
        """Its children are to be written (§14.3)."""
        outcome, state = self.outcome
        return outcome == "created" or (outcome == "exists" and state == "waiting_children")


@dataclass(frozen=True, slots=True)
class FlowCall:
    """One flow_add call: the queue it goes to and the nodes it may create."""

    queue: str
    nodes: tuple[_Node, ...]


class FlowPlan:
    """Validated trees, as the flow_add calls that write them top-down: every
    parent, with its pending children, before any of its children. The roots
    are a flow's root (`parent` empty) or the children a running job adds to
    itself (`parent`: its reference)."""

    def __init__(
        self, roots: Sequence[FlowJob], *, queue: str, prefix: str, specs: SpecBuilder,
        events_maxlen: int, chunk_size: int = 500, parent: str = "",
    ) -> None:  # fmt: skip
        if type(chunk_size) is not int or chunk_size < 1:
            raise ValidationError(f"chunk_size must be a positive int, got {chunk_size!r}")
        self._prefix, self._specs, self._maxlen = prefix, specs, events_maxlen
        self._refs: set[str] = set()
        self.roots = [
            self._plan(root, queue, parent, 0, dict(root.options).get("result_ttl"))
            for root in roots
        ]
        if parent:  # the roots are children a running job adds to itself
            _unique_ids(self.roots, parent)
        self.calls = self._calls(chunk_size)

    @property
    def root_refs(self) -> list[str]:
        return [flows.reference(r.queue, r.args.spec.id) for r in self.roots]

    def _plan(
        self, job: FlowJob, default_queue: str, parent: str, depth: int, result_ttl: Any
    ) -> _Node:
        if not isinstance(job, FlowJob):
            raise ValidationError(f"a flow's nodes are FlowJob, got {job!r}")
        if depth >= MAX_DEPTH:
            raise ValidationError(f"a flow may be at most {MAX_DEPTH} levels deep")
        if job.on_fail not in flows.POLICIES:
            raise ValidationError(f"on_fail must be one of {flows.POLICIES}, got {job.on_fail!r}")
        queue = check_name(job.queue, "queue name") if job.queue is not None else default_queue
        options = dict(job.options)
        check_node_options(options, root=depth == 0 and not parent)
        if result_ttl is not None:
            options.setdefault("result_ttl", result_ttl)
        spec = self._specs.one(job.task, job.data, options)
        ref = flows.reference(queue, spec.id)
        if ref in self._refs:
            raise DuplicateChildError(f"the flow names {ref!r} twice")
        self._refs.add(ref)
        children = [self._plan(c, queue, ref, depth + 1, result_ttl) for c in job.children]
        _unique_ids(children, ref)
        on_fail = "" if job.on_fail == "fail" else job.on_fail
        refs = tuple(flows.reference(c.queue, c.args.spec.id) for c in children)
        if parent == "" and job.on_fail != "fail":
            raise ValidationError("on_fail is about a parent: the root has none")
        node = _Node(queue, flows.FlowNodeArgs(spec, parent, on_fail, refs), depth, children)
        for child in children:
            child.parent = node
        return node

    def _calls(self, chunk_size: int) -> list[FlowCall]:
        """Level by level, each level's nodes by queue. Consecutive levels
        that are all in one queue go together (a parent still before its
        children within the call): a tree in one queue is one call."""
        levels: dict[int, dict[str, list[_Node]]] = {}
        stack = list(reversed(self.roots))
        while stack:
            node = stack.pop()
            levels.setdefault(node.depth, {}).setdefault(node.queue, []).append(node)
            stack.extend(reversed(node.children))
        groups: list[tuple[str, list[_Node]]] = []
        alone = False  # the last group is a whole level in one queue
        for depth in sorted(levels):
            by_queue = levels[depth]
            single = len(by_queue) == 1
            if single and alone and next(iter(by_queue)) == groups[-1][0]:
                groups[-1][1].extend(next(iter(by_queue.values())))
            else:
                groups.extend(by_queue.items())
            alone = single
        calls = []
        for queue, nodes in groups:
            for i in range(0, len(nodes), chunk_size):
                calls.append(FlowCall(queue, tuple(nodes[i : i + chunk_size])))
        return calls

    def _sent(self, flow_call: FlowCall) -> list[_Node]:
        """The nodes of a call to send: those whose parent, written by an
        earlier call, is open (flow_add itself skips those under a node of
        the same call that is not)."""
        members = {id(n) for n in flow_call.nodes}
        return [
            n for n in flow_call.nodes
            if n.parent is None or n.parent.open or id(n.parent) in members
        ]  # fmt: skip

    def call_for(self, flow_call: FlowCall) -> ops.Call | None:
        """The flow_add call of `flow_call` after the calls before it were
        recorded; None when none of its nodes is to be written."""
        nodes = self._sent(flow_call)
        if not nodes:
            return None
        keys = QueueKeys(self._prefix, flow_call.queue)
        return flows.flow_add(keys, [n.args for n in nodes], events_maxlen=self._maxlen)

    def record(self, flow_call: FlowCall, reply: Sequence[Any]) -> None:
        """Note the outcomes of the call made of `call_for(flow_call)`."""
        nodes = self._sent(flow_call)
        standing = flows.decode_flow_standing(reply, len(nodes))
        for i, (node, outcome) in enumerate(
            zip(nodes, flows.decode_flow_add(reply, len(nodes)), strict=True)
        ):
            node.outcome, node.standing = outcome, standing.get(i)

    def result(self) -> list[FlowEnqueued]:
        """The trees of outcomes, once every call was recorded (or skipped)."""
        return [_enqueued(root) for root in self.roots]


def check_node_options(options: Mapping[str, Any], *, root: bool) -> None:
    """Refuse the enqueue options a flow node cannot honour (UnknownOptionError)."""
    upserts = _UPSERT_OPTIONS & set(options)
    if upserts:
        raise UnknownOptionError(f"a flow's node is never upserted: {sorted(upserts)}")
    below_root = set() if root else _ROOT_OPTIONS & set(options)
    if below_root:
        raise UnknownOptionError(f"only a flow's root takes {sorted(below_root)}")


def _unique_ids(children: Sequence[_Node], parent: str) -> None:
    """A parent's children are told apart by id alone (its results, its
    handler's view): one id twice under it, in any queues, is refused."""
    seen: dict[str, str] = {}
    for child in children:
        child_id = child.args.spec.id
        if child_id in seen:
            raise DuplicateChildError(
                f"{parent or 'the flow'} has two children with id {child_id!r}"
                f" (in queues {seen[child_id]!r} and {child.queue!r})"
            )
        seen[child_id] = child.queue


def _enqueued(node: _Node) -> FlowEnqueued:
    outcome, state = node.outcome
    return FlowEnqueued(
        node.standing or node.args.spec.id, node.queue, outcome,
        JobState(state) if state else None, tuple(_enqueued(c) for c in node.children),
    )  # fmt: skip


# --- reading a parent's children ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChildrenResults:
    """What a parent's children left it, keyed by child id: the results of
    those that completed, the errors of those that failed under `ignore`,
    and of those that failed under `fail` or `continue`."""

    results: dict[str, Any]
    ignored: dict[str, str]
    failed: dict[str, str]


@dataclass(frozen=True, slots=True)
class ChildrenCounts:
    total: int
    pending: int
    processed: int
    ignored: int
    failed: int


@dataclass(frozen=True, slots=True)
class FlowNode:
    """One node of a flow as read back: its record (None once deleted by
    retention), its counts, and one page of its children."""

    ref: str
    job: Job | None
    counts: ChildrenCounts
    children: tuple[FlowNode, ...] = ()


def children_keys(keys: QueueKeys, job_id: str) -> tuple[str, str, str]:
    return keys.processed(job_id), keys.ignored(job_id), keys.children_failed(job_id)


def _by_id(raw: Mapping[Any, Any]) -> dict[str, str]:
    return {flows.split_reference(ops.text(k))[1]: ops.text(v) for k, v in raw.items()}


def children_results(processed: Mapping[Any, Any], ignored: Any, failed: Any) -> ChildrenResults:
    results = {k: serializers.loads(v) for k, v in _by_id(processed).items()}
    return ChildrenResults(results, _by_id(ignored), _by_id(failed))


def counts_of(replies: Sequence[Any]) -> ChildrenCounts:
    return ChildrenCounts(*(int(r) for r in replies))


def node_of(ref: str, raw: Mapping[Any, Any], counts: ChildrenCounts) -> FlowNode:
    queue, job_id = flows.split_reference(ref)
    return FlowNode(ref, job_from_hash(queue, job_id, raw) if raw else None, counts)

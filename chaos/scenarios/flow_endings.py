"""Scenario 35: every ending of a child crosses queues (docs/protocol.md §14.5, §14.9) while
workers are SIGKILLed. Trees span three queues: a root in `er`, its middle nodes in `em`, their
leaves in `el`. Leaves complete or fail under each policy, and the producer cancels roots and
middle nodes as they wait. Every parent must end exactly once in the state its children's
endings and policies say, and no node may stay in `waiting_children` or an outbox."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from chaos import ledger
from chaos.checker import Result
from chaos.harness import Scene, admin, settings, wait_until
from chaos.scenarios import scenario
from conveyor.client.events import decode_entries
from conveyor.protocol.keys import QueueKeys

TARGET = "chaos.flow_app:tasks"
ROOTS, MIDS, LEAVES = "er", "em", "el"
LATE = 1.0  # s: a node started this long after its subtree's cancel returned was missed
WAITING = ("waiting", "delayed", "waiting_children")
STALLS = 100  # endings are the subject, not stall limits (see flows.py)
# Tree kinds, by tree number modulo 5: what its leaves do and what the producer does to it.
KINDS = ("complete", "fail", "ignore-continue", "cancel-root", "cancel-mid")


@dataclass
class Tree:
    root: str
    kind: str
    mids: list[str]
    cancelled: bool | None = None  # the producer's cancel returned this
    cancel_at: float = 0.0  # when it returned (monotonic, as the ledger's)
    leaves: list[str] = field(default_factory=list)


def _leaf(tree: int, mid: int, leaf: int, kind: str, rng: Any) -> tuple[str, str, float]:
    """(task, on_fail, seconds) of one leaf."""
    slow = kind == "cancel-root" or (kind == "cancel-mid" and mid == 0)
    s = round(rng.uniform(1.0, 3.0) if slow else rng.uniform(0.0, 0.1), 3)
    if mid == 0 and leaf == 0 and kind == "fail":
        return "boom", "fail", s
    if mid == 0 and leaf == 0 and kind == "ignore-continue":
        return "boom", "ignore", s
    if mid == 1 and leaf == 0 and kind == "ignore-continue":
        return "boom", "continue", s
    return "child", "fail", s


def _enqueue(url: str, count: int, mids: int, leaves: int, rng: Any) -> list[Tree]:
    from conveyor import FlowJob, Queue

    trees = []
    with Queue(ROOTS, url=url, settings=settings()) as q:
        for t in range(count):
            kind = KINDS[t % len(KINDS)]
            tree = Tree(f"r{t:04d}", kind, [f"r{t:04d}-m{m}" for m in range(mids)])
            middle = []
            for m, mid_id in enumerate(tree.mids):
                children = []
                for lf in range(leaves):
                    task, on_fail, s = _leaf(t, m, lf, kind, rng)
                    tree.leaves.append(f"{mid_id}-l{lf}")
                    children.append(FlowJob(
                        task=task, queue=LEAVES, on_fail=on_fail, data={"n": lf, "s": s},
                        options={"id": f"{mid_id}-l{lf}", "max_stalls": STALLS,
                                 "max_failures": 1},
                    ))  # fmt: skip
                on_fail = "ignore" if kind == "cancel-mid" and m == 0 else "fail"
                middle.append(FlowJob(
                    task="fan_in", queue=MIDS, on_fail=on_fail, children=children,
                    options={"id": mid_id, "max_stalls": STALLS},
                ))  # fmt: skip
            q.enqueue_flow(FlowJob(
                task="fan_in", children=middle, options={"id": tree.root, "max_stalls": STALLS}
            ))  # fmt: skip
            trees.append(tree)
    return trees


def _expected(tree: Tree, mids: int) -> tuple[str, str | None]:
    """The root's end: (state, its fan_in's `results:ignored` when it completes)."""
    if tree.kind == "fail":
        return "failed", None
    if tree.kind == "cancel-root":
        return ("gone", None) if tree.cancelled else ("completed", f"{mids}:0")
    if tree.kind == "cancel-mid" and tree.cancelled:
        return "completed", f"{mids - 1}:1"
    return "completed", f"{mids}:0"


def flow_endings(
    scene: Scene, url: str, *, trees: int, mids: int, leaves: int, workers: int, window: float,
    min_kills: int,
) -> Result:  # fmt: skip
    from conveyor import Queue

    r = Result("flow-endings")
    rng = scene.rng
    # beats 2 s apart: a hand-off or a cancel that waited for the heartbeat's drain (the
    # safety net) would show in the checks of promptness below
    lease = 6.0
    pools = [
        scene.workers(url, workers, queue=q, concurrency=4, lease=lease, target=TARGET)
        for q in (ROOTS, MIDS, LEAVES)
    ]
    planted = _enqueue(url, trees, mids, leaves, rng)
    for pool in pools:
        pool.start()
    r.check("workers announced themselves", all(p.wait_ready(30) for p in pools))
    to_cancel = [t for t in planted if t.kind in ("cancel-root", "cancel-mid")]
    rng.shuffle(to_cancel)
    kills = 0
    t0 = time.monotonic()
    with Queue(ROOTS, url=url, settings=settings()) as roots, \
            Queue(MIDS, url=url, settings=settings()) as middle:  # fmt: skip
        while time.monotonic() - t0 < window or to_cancel:
            time.sleep(rng.uniform(0.1, 0.4))
            if to_cancel:
                tree = to_cancel.pop()
                if tree.kind == "cancel-root":
                    tree.cancelled = roots.cancel(tree.root)
                else:
                    tree.cancelled = middle.cancel(tree.mids[0])
                tree.cancel_at = time.monotonic()
            if time.monotonic() - t0 < window:
                pool = rng.choice(pools)
                victim = rng.randrange(pool.count)
                pool.kill(victim)
                pool.start(victim)
                kills += 1
    admins = {q: admin(url, q) for q in (ROOTS, MIDS, LEAVES)}
    keys = {q: QueueKeys("conveyor", q) for q in (ROOTS, MIDS, LEAVES)}

    def state(queue: str, job_id: str) -> str:
        raw = admins[queue].hget(keys[queue].job(job_id), "state")
        return raw.decode() if raw else "gone"

    def ended() -> bool:
        return all(state(ROOTS, t.root) in ("completed", "failed", "gone") for t in planted)

    def cancelled_nodes() -> list[tuple[str, str]]:
        """(queue, id) of the nodes a successful cancel took with it."""
        nodes = []
        for t in planted:
            if t.cancelled and t.kind == "cancel-root":
                nodes += [(MIDS, m) for m in t.mids] + [(LEAVES, lf) for lf in t.leaves]
            elif t.cancelled:
                mid = t.mids[0]
                nodes += [(MIDS, mid)] + [(LEAVES, f"{mid}-l{i}") for i in range(leaves)]
        return nodes

    def none_waiting() -> bool:
        """A node running when its tree was cancelled runs to its end, and again when a kill
        took its worker: none may wait for ever."""
        return not any(state(q, i) in WAITING for q, i in cancelled_nodes())

    def pending(queue: str, job_id: str) -> list[tuple[str, str]]:
        refs = admins[queue].smembers(f"conveyor:{{{queue}}}:pending:{job_id}")
        return [(ref.decode(), state(*ref.decode().split("/", 1))) for ref in sorted(refs)]

    all_ended = wait_until(ended, timeout=lease * 3 + 90)
    settled = wait_until(none_waiting, timeout=lease * 3 + 60)
    # a middle node whose root another middle node failed still runs when its leaves end:
    # those re-run after the kills (as suspects, a few at a time) may end after every root
    wait_until(
        lambda: not any(admins[q].zcard(keys[q].waiting_children) for q in admins),
        timeout=lease * 3 + 60,
    )
    drained = wait_until(
        lambda: all(admins[q].xlen(keys[q].outbox) == 0 for q in admins), timeout=30
    )
    stranded = {
        q: [
            (i.decode(), state(q, i.decode()), pending(q, i.decode()))
            for i in admins[q].zrange(keys[q].waiting_children, 0, 9)
        ]
        for q in admins
    }
    entries = list(ledger.read(scene.ledger_path))
    finishes: dict[str, list[Any]] = defaultdict(list)
    starts: dict[str, list[float]] = defaultdict(list)
    ends: dict[str, list[float]] = defaultdict(list)
    for e in entries:
        if e.kind == "start":
            starts[e.id].append(e.mono)
        elif e.kind in ("finish", "fail"):
            ends[e.id].append(e.mono)
            if e.kind == "finish":
                finishes[e.id].append(e)
    outcomes = Counter()
    for event in decode_entries(admins[ROOTS].xrange(keys[ROOTS].events)):
        if event.name in ("completed", "failed", "cancelled"):
            outcomes[event.job_id] += 1
    wrong, twice, early, late = [], [], [], []
    for tree in planted:
        want, extra = _expected(tree, mids)
        got = state(ROOTS, tree.root)
        seen = finishes[tree.root][-1].extra if finishes[tree.root] else None
        if got != want or (extra is not None and seen != extra):
            error = admins[ROOTS].hget(keys[ROOTS].job(tree.root), "error")
            wrong.append((tree.root, tree.kind, tree.cancelled, got, seen, error))
        if outcomes[tree.root] != 1:
            twice.append((tree.root, outcomes[tree.root]))
        if want == "completed" and starts[tree.root]:
            last_child = max((max(ends[m]) for m in tree.mids if ends[m]), default=0.0)
            if min(starts[tree.root]) < last_child:
                early.append(tree.root)
    cancel_at = {t.root: t.cancel_at for t in planted if t.cancelled}
    for _, node in cancelled_nodes():
        first = min(starts[node], default=None)
        # a node claimed just before the cancel reached it starts a moment later
        if first is not None and first > cancel_at[node.split("-")[0]] + LATE:
            late.append(node)  # it was waiting when the cancel returned, yet ran
    # promptness: a parent failed by a child under `fail` fails within one round trip of it,
    # but a kill may leave a hand-off to the safety net: the median, not the maximum
    reactions = sorted(_reaction(admins, keys, t) for t in planted if t.kind == "fail")
    median = reactions[len(reactions) // 2] if reactions else None
    cancels = Counter((t.kind, t.cancelled) for t in planted if t.kind.startswith("cancel"))
    r.jobs = trees * (1 + mids + mids * leaves)
    r.kills = kills
    r.check(f"at least {min_kills} kills", kills >= min_kills, kills)
    r.check("some cancels removed a waiting node", cancels[("cancel-root", True)] > 0
            and cancels[("cancel-mid", True)] > 0, dict(cancels))  # fmt: skip
    r.check("every root ended", all_ended)
    r.check("every root ended in the state its children's endings and policies say",
            not wrong, wrong[:10])  # fmt: skip
    r.check("every root ended exactly once (one completed, failed or cancelled event)",
            not twice, twice[:10])  # fmt: skip
    r.check("no root ran before all its middle nodes ended", not early, early[:10])
    r.check(f"no node of a cancelled subtree started {LATE} s after the cancel returned",
            not late, late[:10])  # fmt: skip
    r.check("nothing of a cancelled subtree left waiting", settled,
            [n for n in cancelled_nodes() if state(*n) in WAITING][:10])  # fmt: skip
    r.check("no node stranded in waiting_children", not any(stranded.values()), stranded)
    r.check("every outbox drained", drained)
    r.check(f"a parent in another queue fails within {LATE} s of its child (median)",
            median is not None and median < LATE, reactions)  # fmt: skip
    for a in admins.values():
        a.close()
    r.metrics.update(trees=trees, mids=mids, leaves=leaves, kills=kills, median_s=median,
                     cancels={f"{k}:{v}": n for (k, v), n in cancels.items()})  # fmt: skip
    return r


def _reaction(admins: dict[str, Any], keys: dict[str, QueueKeys], tree: Tree) -> float:
    """Seconds from the failing leaf's end to its root's, by Redis time (inf: not both)."""
    leaf = admins[LEAVES].hget(keys[LEAVES].job(f"{tree.mids[0]}-l0"), "finished_at")
    root = admins[ROOTS].hget(keys[ROOTS].job(tree.root), "finished_at")
    return (int(root) - int(leaf)) / 1000 if leaf and root else float("inf")


@scenario(
    35,
    "flow-endings",
    "Flows over three queues whose children complete, fail under every policy and are "
    "cancelled while workers are SIGKILLed: every parent ends once, as its policies say",
    full=dict(trees=150, mids=3, leaves=4, workers=2, window=20.0, min_kills=20),
    bounded=dict(trees=15, mids=2, leaves=3, workers=1, window=4.0, min_kills=3),
)
def flow_endings_single(scene: Scene, **params: Any) -> Result:
    return flow_endings(scene, scene.server().url, **params)

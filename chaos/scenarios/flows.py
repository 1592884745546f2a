"""Scenarios 24 and 25: flows (docs/protocol.md §14) while workers are SIGKILLed, on one Redis
and on a 3-master cluster. Each parent has children in its own queue (the finishing script's
fast path) and in another queue (the outbox, drained by the workers' couriers); workers of both
queues die at random, and a drainer is killed on purpose between applying hand-offs and
deleting them. Every parent must complete once, after all its children, with all their results,
and no parent may stay in waiting_children."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from typing import Any

from chaos import ledger
from chaos.checker import Result
from chaos.harness import ROOT, Scene, admin, settings, wait_until
from chaos.scenarios import scenario
from chaos.scenarios.cluster import on_another_master, start_cluster
from conveyor.client.events import decode_entries
from conveyor.protocol.keys import QueueKeys

TARGET = "chaos.flow_app:tasks"

# A drainer that applies one batch of hand-offs and dies before deleting them (§14.5 step 3).
_CRASHING_DRAINER = """
import os, signal, sys
from conveyor import Queue
from conveyor.protocol import flows
url, kids, parents = sys.argv[1:4]
with Queue(kids, url=url) as k, Queue(parents, url=url) as p:
    entries = flows.decode_outbox(k.client.xrange(k.core.keys.outbox, count=50))
    hand_offs = [e for e in entries if e.op == ""]
    if hand_offs:
        p.runner.run(flows.flow_settle(p.core.keys, hand_offs, events_maxlen=2000000))
    print(len(hand_offs), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


# The scenario tests hand-offs, not stall limits: with the default max_stalls (3), a child
# whose worker is killed three times (34 kills in 90 s at full size) fails for good, and its
# parent with it (the `fail` policy), which the checks below would count as a lost hand-off.
STALLS = 100


def _enqueue(url: str, parents: str, kids: str, count: int, width: int, rng: Any) -> list[str]:
    from conveyor import FlowJob, Queue

    ids = []
    with Queue(parents, url=url, settings=settings()) as q:
        for p in range(count):
            children = [
                FlowJob(
                    task="child", queue=kids if c % 2 else parents,
                    data={"n": c + 1, "s": round(rng.uniform(0.0, 0.05), 3)},
                    options={"id": f"p{p:04d}-c{c}", "max_stalls": STALLS},
                )
                for c in range(width)
            ]  # fmt: skip
            ids.append(
                q.enqueue_flow(
                    FlowJob(task="parent", children=children,
                            options={"id": f"p{p:04d}", "max_stalls": STALLS})  # fmt: skip
                ).id
            )
    return ids


def _crash_drainer(url: str, kids: str, parents: str) -> tuple[int, int]:
    """(hand-offs applied, return code: -9 when it died as planned)."""
    done = subprocess.run(
        [sys.executable, "-c", _CRASHING_DRAINER, url, kids, parents],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    applied = int(done.stdout.strip() or 0) if done.stdout.strip().isdigit() else 0
    return applied, done.returncode


def _complete_without_draining(scene: Scene, url: str, kids: str, *, count: int) -> None:
    """Claim and complete `count` children of `kids` by the scripts alone, as a worker would,
    writing their ledger entries; no courier runs."""
    import json

    from conveyor import Queue
    from conveyor.protocol import ops

    with Queue(kids, url=url, settings=settings()) as q:
        q.check()
        call = ops.claim(
            q.core.keys, worker_id="chaos-no-courier", count=count, lease_ms=60_000,
            token="chaos-token", promote=0, events_maxlen=2_000_000,
        )  # fmt: skip
        claimed = ops.decode_claim(q.runner.run(call)).jobs
        items = []
        for job in claimed:
            scene.ledger.record("start", job.id, job.attempts)
            scene.ledger.record("finish", job.id, job.attempts)
            items.append((job.id, "chaos-token", str(json.loads(job.data or b"{}")["n"])))
        q.runner.run(ops.complete(q.core.keys, items, events_maxlen=2_000_000))


def flow_sigkill(
    scene: Scene, url: str, parents: str, kids: str, *, flows: int, width: int, window: float,
    min_kills: int,
) -> Result:  # fmt: skip
    r = Result("flows")
    rng = scene.rng
    lease = 2.0
    pools = [
        scene.workers(url, 2, queue=q, concurrency=4, lease=lease, target=TARGET)
        for q in (parents, kids)
    ]
    ids = _enqueue(url, parents, kids, flows, width, rng)
    # a worker that completes children, then dies before any drain: its hand-offs wait in the
    # outbox, where a drainer applies them and dies too, before deleting them
    _complete_without_draining(scene, url, kids, count=min(20, flows))
    first_crash = _crash_drainer(url, kids, parents)
    for pool in pools:
        pool.start()
    r.check("workers announced themselves", all(p.wait_ready(20) for p in pools))
    kills, crashes, crash_applied = 0, [first_crash[1]], first_crash[0]
    t0 = time.monotonic()
    while time.monotonic() - t0 < window:
        time.sleep(rng.uniform(0.2, 0.8))
        pool = rng.choice(pools)
        victim = rng.randrange(pool.count)
        pool.kill(victim)
        pool.start(victim)
        kills += 1
        if kills % 3 == 0:
            applied, code = _crash_drainer(url, kids, parents)
            crashes.append(code)
            crash_applied += applied
    p_admin, k_admin = admin(url, parents), admin(url, kids)
    pk, kk = QueueKeys("conveyor", parents), QueueKeys("conveyor", kids)

    def finished() -> bool:
        states = [p_admin.hget(pk.job(i), "state") for i in ids]
        return all(s == b"completed" for s in states)

    applied, code = _crash_drainer(url, kids, parents)  # once more, after the kills
    crashes.append(code)
    crash_applied += applied
    all_done = wait_until(finished, timeout=lease * 3 + 60)
    outboxes_empty = wait_until(
        lambda: p_admin.xlen(pk.outbox) == 0 and k_admin.xlen(kk.outbox) == 0, timeout=10
    )
    entries = list(ledger.read(scene.ledger_path))
    starts: dict[str, list[float]] = defaultdict(list)
    finishes: dict[str, list[Any]] = defaultdict(list)
    for e in entries:
        if e.kind == "start":
            starts[e.id].append(e.mono)
        elif e.kind == "finish":
            finishes[e.id].append(e)
    events = Counter()
    for event in decode_entries(p_admin.xrange(pk.events)):  # one per job (§11)
        if event.name in ("children_done", "completed"):
            events[(event.name, event.job_id)] += 1
    early, incomplete, twice_released, twice_completed = [], [], [], []
    expected = f"{width}:{width * (width + 1) // 2}"
    for pid in ids:
        kids_done = [
            max(f.mono for f in finishes[f"{pid}-c{c}"])
            for c in range(width)
            if finishes[f"{pid}-c{c}"]
        ]
        if len(kids_done) < width or (starts[pid] and min(starts[pid]) < max(kids_done)):
            early.append(pid)
        if not finishes[pid] or finishes[pid][-1].extra != expected:
            incomplete.append(pid)
        if events[("children_done", pid)] != 1:
            twice_released.append((pid, events[("children_done", pid)]))
        if events[("completed", pid)] != 1:
            twice_completed.append((pid, events[("completed", pid)]))
    stranded = p_admin.zcard(pk.waiting_children) + k_admin.zcard(kk.waiting_children)
    p_admin.close()
    k_admin.close()
    r.jobs = flows * (width + 1)
    r.kills = kills
    r.check(f"at least {min_kills} kills", kills >= min_kills, kills)
    r.check(
        "the crashing drainers applied hand-offs and died before deleting them",
        crash_applied > 0 and all(c == -signal.SIGKILL for c in crashes),
        f"{crash_applied} applied by {len(crashes)} drainers, return codes {sorted(set(crashes))}",
    )
    r.check("every parent completed", all_done)
    r.check("no parent stranded in waiting_children", stranded == 0, stranded)
    r.check("every outbox drained", outboxes_empty)
    r.check("no parent started before all its children finished", not early, early[:10])
    r.check(
        f"every parent ran with all its children's results ({expected})",
        not incomplete,
        incomplete[:10],
    )
    r.check(
        "every parent released exactly once (children_done)",
        not twice_released,
        twice_released[:10],
    )
    r.check("every parent completed exactly once", not twice_completed, twice_completed[:10])
    reruns = sum(max(0, len(starts[p]) - 1) for p in ids)
    r.metrics.update(
        flows=flows, width=width, kills=kills, parent_reruns_after_kills=reruns,
        crashed_drainers=len(crashes), hand_offs_applied_by_crashed_drainers=crash_applied,
    )  # fmt: skip
    return r


@scenario(
    24,
    "flows-sigkill",
    "Flows across two queues on one Redis while workers are SIGKILLed and a drainer dies "
    "between applying hand-offs and deleting them: every parent once, after all its children",
    full=dict(flows=400, width=10, window=20.0, min_kills=20),
    bounded=dict(flows=24, width=6, window=4.0, min_kills=3),
)
def flows_single(scene: Scene, *, flows: int, width: int, window: float, min_kills: int) -> Result:
    url = scene.server().url
    return flow_sigkill(scene, url, "flows", "flowkids", flows=flows, width=width, window=window,
                        min_kills=min_kills)  # fmt: skip


@scenario(
    25,
    "flows-sigkill-cluster",
    "Scenario 24 on a 3-master Redis Cluster, parents and children on different masters",
    full=dict(flows=400, width=10, window=20.0, min_kills=20),
    bounded=dict(flows=24, width=6, window=4.0, min_kills=3),
)
def flows_cluster(scene: Scene, *, flows: int, width: int, window: float, min_kills: int) -> Result:
    nodes = start_cluster(scene)
    url = f"redis+cluster://127.0.0.1:{nodes[0].port}"
    kids = on_another_master(nodes, "flows")
    r = flow_sigkill(scene, url, "flows", kids, flows=flows, width=width, window=window,
                     min_kills=min_kills)  # fmt: skip
    r.metrics["queues"] = {"parents": "flows", "children": kids}
    return r

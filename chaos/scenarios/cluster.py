"""Scenario 16: a 3-master Redis Cluster on loopback."""

from __future__ import annotations

import time
from typing import Any

import redis

from chaos.checker import Result
from chaos.harness import Scene
from chaos.scenarios import scenario
from chaos.scenarios.state import same_id
from chaos.scenarios.workers import sigkill_loop
from conveyor.integrations import redis_cluster
from conveyor.integrations.redis_cluster import form_cluster, free_cluster_port


def _merge(into: Result, part: Result, prefix: str) -> None:
    for c in part.checks:
        into.check(f"{prefix}: {c.what}", c.ok, c.detail)
    into.jobs += part.jobs
    into.lost += part.lost
    into.duplicates += part.duplicates
    into.unexpected += part.unexpected
    into.kills += part.kills
    if part.max_recovery_s is not None:
        into.max_recovery_s = max(into.max_recovery_s or 0.0, part.max_recovery_s)
    into.metrics[prefix] = {k: v for k, v in part.metrics.items() if not isinstance(v, dict)}


def start_cluster(scene: Scene, masters: int = 3) -> list[Any]:
    nodes = [
        scene.server(
            name=f"node-{i}",
            port=free_cluster_port(),
            extra_args=[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "3000",
            ],
        )  # fmt: skip
        for i in range(masters)
    ]
    form_cluster([n.port for n in nodes])
    return nodes


def slot_owner(nodes: list[Any], queue: str) -> tuple[int, int]:
    """(slot of the queue's hash tag, port of the master that serves it)."""
    return redis_cluster.slot_owner(nodes[0].port, f"conveyor:{{{queue}}}:meta")


def on_another_master(nodes: list[Any], queue: str) -> str:
    """A queue name whose slot another master serves than `queue`'s."""
    taken = slot_owner(nodes, queue)[1]
    for i in range(1000):
        name = f"{queue}-{i}"
        if slot_owner(nodes, name)[1] != taken:
            return name
    raise LookupError("no queue name on another master")


@scenario(
    16,
    "redis-cluster",
    "A 3-master Redis Cluster on loopback: scenarios 1 and 15 through a redis+cluster:// URL, "
    "queues on different masters, no CROSSSLOT",
    # Scenario 1's premise is a producer offering more than the workers take, so that its
    # last kill hits work: with up to 4 workers x 8 slots (about 460 jobs/s at 0.07 s a job),
    # the bounded run offers 2,000 jobs in 3.6 s (about 555/s). 800 (222/s) let 4 workers
    # keep up, and on a slow host the last kill once came after the last job.
    full=dict(jobs=10_000, window=20.0, min_kills=13),
    bounded=dict(jobs=2_000, window=4.0, min_kills=2),
)
def cluster(scene: Scene, *, jobs: int, window: float, min_kills: int) -> Result:
    from conveyor import Queue
    from conveyor.errors import ConfigurationError, ConveyorError

    r = Result("redis-cluster")
    nodes = start_cluster(scene)
    first, second = "chaos", on_another_master(nodes, "chaos")
    slot, owner = slot_owner(nodes, first)
    other = next(n.port for n in nodes if n.port != owner)
    # one seed, and not the queue's master: the client must discover where its slot is
    url = f"redis+cluster://127.0.0.1:{other}"
    r.metrics.update(
        masters=len(nodes),
        queues={
            q: {"slot": s, "master": p} for q in (first, second) for s, p in [slot_owner(nodes, q)]
        },
    )

    # Scenario 1 on one master, scenario 15 on another, every client and worker
    # through the cluster URL: each queue's connections go to its slot's master.
    workers = scene.rng.randint(2, 4)
    part = sigkill_loop(scene, jobs=jobs, workers=workers, concurrency=8, window=window,
                        lease=2.0, min_kills=min_kills, url=url, queue=first)  # fmt: skip
    _merge(r, part, f"scenario 1 (queue {first!r}, {workers} workers)")
    for pool in scene.pools:  # scenario 15 races producers alone
        pool.stop()
    part = same_id(scene, producers=50, rounds=2, url=url, queue=second)
    _merge(r, part, f"scenario 15 (queue {second!r})")
    logs = scene.logs()
    r.check(
        "no CROSSSLOT (nor 'non local key') error anywhere",
        "CROSSSLOT" not in logs and "non local key" not in logs.lower(),
    )
    probe = redis.Redis(port=owner)
    try:
        probe.eval("return redis.call('GET', KEYS[1])", 2, "a{x}", "b{y}")
        crossslot = "accepted"
    except redis.ResponseError as exc:
        crossslot = str(exc)
    finally:
        probe.close()
    r.check(
        "(sanity) this cluster does refuse a cross-slot script",
        "CROSSSLOT" in crossslot or "same slot" in crossslot,
        crossslot[:80],
    )

    # The client side: a cluster URL seeded with any node reaches the slot's
    # master; a plain URL to a node that does not serve the slot says what to use.
    t0 = time.monotonic()
    try:
        with Queue(first, url=url) as q:
            q.enqueue("work", {"s": 0})
        via_other = "ok"
    except ConveyorError as exc:
        via_other = f"{type(exc).__name__}: {exc}"
    except Exception as exc:
        via_other = f"{type(exc).__module__}.{type(exc).__name__} (not a ConveyorError): {exc}"
    r.check(
        "a redis+cluster:// client seeded with another node follows the redirect (MOVED)",
        via_other == "ok",
        f"{via_other[:160]} ({time.monotonic() - t0:.2f} s)",
    )
    try:
        Queue(first, url=f"redis://127.0.0.1:{other}/0").enqueue("work", {"s": 0})
        plain = "ok"
    except ConfigurationError as exc:
        plain = f"ConfigurationError: {exc}"
    except Exception as exc:
        plain = f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
    r.check(
        "a plain redis:// URL to a node that does not serve the slot: a ConfigurationError "
        "naming redis+cluster://",
        plain.startswith("ConfigurationError") and "redis+cluster://" in plain,
        plain[:160],
    )
    return r

"""Scenario 16: a 3-master Redis Cluster on loopback."""

from __future__ import annotations

import socket
import subprocess
import time
from typing import Any

import redis
from redis.crc import key_slot

from chaos.checker import Result
from chaos.harness import Scene, wait_until
from chaos.scenarios import scenario
from chaos.scenarios.state import same_id
from chaos.scenarios.workers import sigkill_loop


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


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_port(rng: Any) -> int:
    """A free port whose cluster bus port (+10000) is free too (and <= 65535)."""
    for _ in range(200):
        port = rng.randint(20_000, 45_000)
        if _bindable(port) and _bindable(port + 10_000):
            return port
    raise RuntimeError("no free port pair for a cluster node")


def start_cluster(scene: Scene, masters: int = 3) -> list[Any]:
    nodes = [
        scene.server(
            name=f"node-{i}",
            port=cluster_port(scene.rng),
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
    addrs = [f"127.0.0.1:{n.port}" for n in nodes]
    subprocess.run(
        ["redis-cli", "--cluster", "create", *addrs, "--cluster-replicas", "0", "--cluster-yes"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip

    def ok() -> bool:
        for n in nodes:
            c = redis.Redis(port=n.port)
            try:
                if b"cluster_state:ok" not in c.execute_command("CLUSTER", "INFO"):
                    return False
            finally:
                c.close()
        return True

    if not wait_until(ok, 30, 0.2):
        raise RuntimeError("the cluster did not reach cluster_state:ok")
    return nodes


def slot_owner(nodes: list[Any], queue: str) -> tuple[int, int]:
    """(slot of the queue's hash tag, port of the master that serves it)."""
    slot = key_slot(f"conveyor:{{{queue}}}:meta".encode())
    c = redis.Redis(port=nodes[0].port)
    try:
        for start, end, master, *_ in c.execute_command("CLUSTER", "SLOTS"):
            if int(start) <= slot <= int(end):
                return slot, int(master[1])
    finally:
        c.close()
    raise LookupError(slot)


@scenario(
    16,
    "redis-cluster",
    "A 3-master Redis Cluster on loopback: scenarios 1 and 15, no CROSSSLOT",
    full=dict(jobs=5_000, window=12.0, min_kills=8),
    bounded=dict(jobs=800, window=4.0, min_kills=2),
)
def cluster(scene: Scene, *, jobs: int, window: float, min_kills: int) -> Result:
    from conveyor import Queue
    from conveyor.errors import ConveyorError

    r = Result("redis-cluster")
    nodes = start_cluster(scene)
    slot, owner = slot_owner(nodes, "chaos")
    other = next(n.port for n in nodes if n.port != owner)
    r.metrics.update(slot=slot, owner_port=owner, masters=len(nodes))
    owner_url = f"redis://127.0.0.1:{owner}/0"

    # Cluster safety of the protocol: every script touches one slot only. Run the worker
    # scenarios against the node that serves the queue's slot: Redis in cluster mode refuses
    # any command or script that crosses slots (CROSSSLOT) or touches another node's keys.
    part = sigkill_loop(scene, jobs=jobs, workers=2, concurrency=8, window=window, lease=2.0,
                        min_kills=min_kills, url=owner_url)  # fmt: skip
    _merge(r, part, "scenario 1 on the slot's master")
    for pool in scene.pools:  # scenario 15 races producers alone
        pool.stop()
    part = same_id(scene, producers=50, rounds=2, url=owner_url)
    _merge(r, part, "scenario 15 on the slot's master")
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

    # The client side: a Conveyor client pointed at any other node must follow MOVED.
    t0 = time.monotonic()
    try:
        Queue("chaos", url=f"redis://127.0.0.1:{other}/0").enqueue("work", {"s": 0})
        via_other = "ok"
    except ConveyorError as exc:
        via_other = f"{type(exc).__name__}: {exc}"
    except Exception as exc:
        via_other = f"{type(exc).__module__}.{type(exc).__name__} (not a ConveyorError): {exc}"
    r.metrics["enqueue_via_other_node"] = via_other[:200]
    r.check(
        "a client pointed at another node of the cluster follows the redirect (MOVED)",
        via_other == "ok",
        f"{via_other[:160]} ({time.monotonic() - t0:.2f} s)",
    )
    try:
        from redis.cluster import RedisCluster

        rc = RedisCluster(host="127.0.0.1", port=other)
        Queue("chaos", client=rc).enqueue("work", {"s": 0})  # type: ignore[arg-type]
        injected = "ok"
        rc.close()
    except Exception as exc:
        injected = f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
    r.metrics["enqueue_with_injected_RedisCluster"] = injected[:200]
    return r

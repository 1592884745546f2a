"""Scenario 34: Redis Sentinel, forced failovers under load."""

from __future__ import annotations

import threading
import time

from chaos import ledger
from chaos.checker import Result, tally
from chaos.harness import Enqueue, Scene, admin, drained, wait_until
from chaos.scenarios import scenario
from chaos.sentinel import Deployment, new_sentinel
from conveyor.errors import UnreplicatedWriteError


def start_deployment(scene: Scene, replicas: int = 2, sentinels: int = 3) -> Deployment:
    """A master, `replicas` replicas and `sentinels` sentinels, all the scene's."""
    master = scene.server(name="master")
    followers = [
        scene.server(name=f"replica-{i}", extra_args=["--replicaof", "127.0.0.1", str(master.port)])
        for i in range(replicas)
    ]
    started = []
    for i in range(sentinels):
        assert master.port is not None
        process = new_sentinel(scene.binary, scene.dir / f"sentinel-{i}", master.port)
        scene.servers.append(process)  # stopped with the scene
        started.append(process.start())
    deployment = Deployment(master, followers, started)
    deployment.wait_ready()
    return deployment


def _fail_over(deployment: Deployment, kill: bool) -> tuple[int, int, float]:
    """SENTINEL FAILOVER, or SIGKILL of the master, restarted as the docs say:
    with --replicaof the new master, never as an empty master a later failover
    could promote; (old port, new port, seconds)."""
    old = deployment.master_port()
    started = time.monotonic()
    if kill:
        victim = next(s for s in deployment.servers if s.port == old)
        victim.kill()
        new = deployment.wait_new_master(old, timeout=90)
        victim.start(replicaof=new)
    else:
        new = deployment.failover(timeout=90)
    return old, new, time.monotonic() - started


@scenario(
    34,
    "sentinel-failover",
    "Redis Sentinel (a master, 2 replicas, 3 sentinels): a producer and workers with "
    "min_replicas=2 (every replica) through a redis+sentinel:// URL while the master fails "
    "over (SENTINEL FAILOVER, then SIGKILL): 0 acknowledged jobs lost",
    full=dict(jobs=3000, window=40.0, failovers=4),
    bounded=dict(jobs=300, window=10.0, failovers=2),
)
def sentinel_failover(scene: Scene, *, jobs: int, window: float, failovers: int) -> Result:
    """min_replicas is every replica: the one promoted has every acknowledged
    write. (With 1 of 2, a SENTINEL FAILOVER lost 35 of 300 acknowledged
    jobs: written on the old master after the promoted replica stopped
    following it, acknowledged by the other replica, which then resynced
    from the new master.)"""
    r = Result("sentinel-failover")
    replicas = 2
    deployment = start_deployment(scene, replicas=replicas)
    url = deployment.url()
    durable = {"CHAOS_MIN_REPLICAS": str(replicas)}
    pool = scene.workers(url, 2, concurrency=8, lease=2.0, env=durable)
    pool.start()
    r.check("workers announced themselves", pool.wait_ready(30))
    producer = scene.producer(url, min_replicas=replicas)
    specs = [Enqueue(f"j{n:06d}", "work", {"s": 0.01}) for n in range(jobs)]
    feeder = threading.Thread(
        target=producer.stream,
        args=(specs,),
        kwargs={"seconds": window, "batch": 5, "retry_for": 120.0},
    )
    feeder.start()
    moves = []
    for k in range(failovers):
        time.sleep(window / (failovers + 1))
        moves.append(_fail_over(deployment, kill=k % 2 == 1))
    feeder.join(timeout=window + 240)
    client = admin(url)  # on the master of now
    try:
        drained_ok = wait_until(drained(client, "chaos", jobs), timeout=120)
        t = tally(list(ledger.read(scene.ledger_path)), client, "chaos")
    finally:
        client.close()

    r.absorb(t)
    r.kills = len(moves)
    r.max_recovery_s = max((s for _, _, s in moves), default=0.0)
    kinds = [kind for _, kind, _ in producer.errors]
    r.metrics.update(
        failovers=[{"from": a, "to": b, "seconds": round(s, 2)} for a, b, s in moves],
        producer_errors=len(producer.errors),
        unreplicated_errors=kinds.count(UnreplicatedWriteError.__name__),
    )
    r.check(
        f"{failovers} failover(s), each to another master",
        len(moves) == failovers and all(a != b for a, b, _ in moves),
        moves,
    )
    r.check("every enqueue acknowledged", len(producer.acked) == jobs, len(producer.acked))
    r.check("all jobs finished", drained_ok, t.states)
    r.check("0 lost", not t.lost, t.lost[:10])
    r.check("0 unexpected", not t.unexpected, t.unexpected[:10])
    r.check("0 completions accepted twice (fencing)", not t.double_acks, t.double_acks[:10])
    r.check("0 completed without the handler finishing", not t.phantom, t.phantom[:10])
    return r

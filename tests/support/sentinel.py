"""A Redis Sentinel deployment on loopback for tests: a master, replicas and
sentinels, each a private server, their files in the factory's temp dir
(the processes and waits are chaos/sentinel.py's, shared with the chaos suite)."""

from __future__ import annotations

from pathlib import Path

from chaos.sentinel import Deployment, new_sentinel

from support.servers import ServerFactory


def start_deployment(
    factory: ServerFactory, base_dir: Path, *, replicas: int = 1, sentinels: int = 3
) -> Deployment:
    """A master, `replicas` replicas of it, and `sentinels` sentinels, ready
    for a failover; every process stops with the factory."""
    master = factory()
    assert master.port is not None
    followers = [
        factory(extra_args=["--replicaof", "127.0.0.1", str(master.port)]) for _ in range(replicas)
    ]
    started = []
    for i in range(sentinels):
        process = new_sentinel(factory.binary, base_dir / f"sentinel-{i}", master.port)
        factory.adopt(process)
        started.append(process.start())
    deployment = Deployment(master, followers, started)
    deployment.wait_ready()
    return deployment

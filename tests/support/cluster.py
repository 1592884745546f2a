"""A Redis Cluster of a few masters on loopback, built from private servers."""

from __future__ import annotations

import time

import redis

from conveyor.integrations.redis_cluster import form_cluster, free_cluster_port, slot_owner
from conveyor.integrations.redis_server import RedisProcess
from support.servers import ServerFactory


def start_cluster(factory: ServerFactory, masters: int = 3) -> list[RedisProcess]:
    """`masters` cluster-enabled servers, the slots split evenly, met, and ok."""
    nodes = [
        factory(
            port=free_cluster_port(),
            extra_args=["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"],
        )
        for _ in range(masters)
    ]
    form_cluster([n.port for n in nodes if n.port is not None])
    return nodes


def owner_port(nodes: list[RedisProcess], key: str) -> int:
    """The port of the master that serves `key`'s slot."""
    assert nodes[0].port is not None
    return slot_owner(nodes[0].port, key)[1]


def cluster_url(nodes: list[RedisProcess], *, seeds: int = 1) -> str:
    return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in nodes[:seeds])


def _node_id(client: redis.Redis) -> str:
    return str(client.execute_command("CLUSTER", "MYID").decode())


def migrate_slot(nodes: list[RedisProcess], slot: int, to_port: int) -> None:
    """Move `slot` and its keys to the master on `to_port`, the way
    `redis-cli --cluster reshard` does (IMPORTING/MIGRATING, MIGRATE, NODE)."""
    clients = {n.port: redis.Redis(port=n.port) for n in nodes}
    try:
        source_port = next(
            int(m[1])
            for s, e, m, *_ in clients[to_port].execute_command("CLUSTER", "SLOTS")
            if int(s) <= slot <= int(e)
        )
        source, target = clients[source_port], clients[to_port]
        source_id, target_id = _node_id(source), _node_id(target)
        target.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        source.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        while keys := source.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 500):
            source.execute_command("MIGRATE", "127.0.0.1", to_port, "", 0, 5000, "KEYS", *keys)
        for client in (target, source, *clients.values()):
            client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
    finally:
        for client in clients.values():
            client.close()


def add_replica(
    factory: ServerFactory, nodes: list[RedisProcess], master_port: int
) -> RedisProcess:
    """A new node that joins the cluster as a replica of the master on `master_port`."""
    node = factory(
        port=free_cluster_port(),
        extra_args=["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"],
    )
    replica, master = redis.Redis(port=node.port), redis.Redis(port=master_port)
    try:
        master_id = _node_id(master)
        replica.execute_command("CLUSTER", "MEET", "127.0.0.1", master_port)
        deadline = time.monotonic() + 30
        while True:  # "Unknown node" until the handshake with the master is done
            try:
                replica.execute_command("CLUSTER", "REPLICATE", master_id)
                break
            except redis.ResponseError:
                assert time.monotonic() < deadline, "the new node never learned of the master"
                time.sleep(0.1)
        while replica.info("replication").get("master_link_status") != "up":
            assert time.monotonic() < deadline, "the replica never synced"
            time.sleep(0.1)
    finally:
        replica.close()
        master.close()
    return node

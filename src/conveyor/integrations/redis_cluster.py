"""A Redis Cluster of private servers on loopback, for the test suite and the fault tests:
the ports, the forming (what `redis-cli --cluster create` does, so no redis-cli is needed) and
the owner of a key's slot."""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from typing import Any

import redis
from redis.crc import key_slot

__all__ = ["CLUSTER_SLOTS", "form_cluster", "free_cluster_port", "slot_owner"]

CLUSTER_SLOTS = 16384
_LOOPBACK = "127.0.0.1"
_BUS_OFFSET = 10_000  # a node's cluster bus listens on its port + 10000


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((_LOOPBACK, port))
        except OSError:
            return False
    return True


def _command(client: redis.Redis, *args: object) -> Any:
    return client.execute_command(*args)  # type: ignore[no-untyped-call]


def free_cluster_port() -> int:
    """A free loopback port whose cluster bus port is free too."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind((_LOOPBACK, 0))
            port: int = probe.getsockname()[1]
        if port + _BUS_OFFSET <= 65_535 and _bindable(port + _BUS_OFFSET):
            return port
    raise RuntimeError("no free port pair for a cluster node")


def form_cluster(ports: Sequence[int], *, timeout: float = 30.0) -> None:
    """Split the slots evenly over the cluster-enabled servers on `ports`, introduce them to
    each other, and wait until every one reports `cluster_state:ok`."""
    clients = [redis.Redis(host=_LOOPBACK, port=port) for port in ports]
    try:
        for i, client in enumerate(clients):
            first = i * CLUSTER_SLOTS // len(ports)
            last = (i + 1) * CLUSTER_SLOTS // len(ports) - 1
            _command(client, "CLUSTER", "ADDSLOTS", *range(first, last + 1))
            # A distinct config epoch each, as `redis-cli --cluster create` gives: met at 0,
            # the nodes resolve their collisions over later gossip, and a node whose epoch
            # rose then could win a slot just moved away from it and make the new owner
            # drop that slot's keys (seen on Redis 6.2 right after a migration).
            _command(client, "CLUSTER", "SET-CONFIG-EPOCH", i + 1)
        for port in ports[1:]:
            _command(clients[0], "CLUSTER", "MEET", _LOOPBACK, port)
        deadline = time.monotonic() + timeout
        while not all(b"cluster_state:ok" in _command(c, "CLUSTER", "INFO") for c in clients):
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not reach cluster_state:ok")
            time.sleep(0.1)
    finally:
        for client in clients:
            client.close()


def slot_owner(port: int, key: str) -> tuple[int, int]:
    """(slot of `key`, port of the master serving it), as the node on `port` sees it."""
    slot = key_slot(key.encode())
    client = redis.Redis(host=_LOOPBACK, port=port)
    try:
        for start, end, master, *_ in _command(client, "CLUSTER", "SLOTS"):
            if int(start) <= slot <= int(end):
                return slot, int(master[1])
    finally:
        client.close()
    raise LookupError(slot)

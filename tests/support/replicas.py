"""A master with one replica, and a way to stop that replica for a while."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import redis

from conveyor.integrations.redis_server import RedisProcess
from support.servers import ServerFactory
from support.workers import wait_until


def master_with_replica(factory: ServerFactory) -> tuple[RedisProcess, RedisProcess]:
    primary = factory()
    replica = factory(extra_args=["--replicaof", "127.0.0.1", str(primary.port)])
    with redis.Redis(port=primary.port) as client:
        online = lambda: client.info("replication").get("slave0", {}).get("state") == "online"  # noqa: E731
        wait_until(online, timeout=30)
    return primary, replica


def stopped_for(replica: RedisProcess, seconds: float) -> threading.Timer:
    """SIGSTOP the replica (it acknowledges nothing) and SIGCONT it after
    `seconds`; join the returned timer to be sure it runs again."""
    assert replica.pid is not None
    os.kill(replica.pid, signal.SIGSTOP)
    stat = Path(f"/proc/{replica.pid}/stat")
    wait_until(lambda: stat.read_text().rsplit(")", 1)[1].split()[0] == "T")
    resume = threading.Timer(seconds, os.kill, (replica.pid, signal.SIGCONT))
    resume.start()
    return resume

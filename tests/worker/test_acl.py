"""The least-privilege Redis ACL of docs/deployment/security.md: a producer
and a real worker of queue `orders`, each its own ACL user limited to
`~conveyor:{orders}:*`, run jobs to completion; with the same credentials,
queue `billing` can be neither read nor written (a typed error, nothing
written)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import httpx
import pytest
import redis

from conveyor import JobState, Queue
from conveyor.errors import ConfigurationError
from conveyor.integrations.redis_server import RedisProcess, server_version
from conveyor.integrations.web import DashboardSettings, dashboard_app
from support.servers import ServerFactory
from support.workers import spawn_worker, wait_until

# The commands Conveyor's Lua scripts run: Redis checks each against the
# user that called EVALSHA, so every user that runs scripts needs them.
SCRIPTED = (
    "del exists get hdel hexists hget hgetall hincrby hmget hset hsetnx hvals ltrim "
    "object|encoding persist pexpire pexpireat pttl rename rpush sadd scard set sismember srem "
    "time xadd xlen xtrim zadd zcard zpopmin zrange zrangebyscore zrem zremrangebyrank "
    "zremrangebyscore zscore"
)
CONNECT = "hello auth ping info client|setname"
SCRIPTS = "evalsha eval script|load"
PRODUCER = f"{CONNECT} {SCRIPTS} {SCRIPTED} bzpopmin xread xrange xrevrange lindex lrange zcount"
WORKER = f"{CONNECT} {SCRIPTS} {SCRIPTED} bzpopmin xread xrange zcount zmscore mget"
# Read commands only, on keys it may only read (%R~): its scripts cannot write.
DASHBOARD = f"{CONNECT} {SCRIPTS} time +@read"

TOLERATED = {(b"conveyor:queues", b"key"), (b"config|get", b"command")}


@pytest.fixture
def tolerated(redis_binary: str) -> set[tuple[bytes, bytes]]:
    """What ACL LOG may hold. Redis 6.2 logs a command without its
    subcommand, and refuses redis-py's connect-time CLIENT calls that it does
    not know (redis-py ignores that error); 7.0+ rejects them as unknown first."""
    if server_version(redis_binary) >= (7, 0, 0):
        return TOLERATED
    return TOLERATED | {(b"config", b"command"), (b"client", b"command")}


def acl(name: str, commands: str, *, read_only: bool = False) -> list[str]:
    """ACL SETUSER's arguments: queue `orders`'s keys, no channels, `commands` only."""
    allowed = [c if c.startswith("+") else f"+{c}" for c in commands.split()]
    keys = ("%R~" if read_only else "~") + "conveyor:{orders}:*"
    return [name, "reset", "on", f">{name}-pw", keys, "resetchannels", "-@all", *allowed]


@pytest.fixture
def server(server_factory: ServerFactory) -> Iterator[RedisProcess]:
    server = server_factory()
    with redis.Redis(port=server.port) as admin:
        for name, commands in (("producer", PRODUCER), ("worker", WORKER)):
            admin.execute_command("ACL", "SETUSER", *acl(name, commands))
    yield server


def url(server: RedisProcess, user: str) -> str:
    return f"redis://{user}:{user}-pw@127.0.0.1:{server.port}/0"


def test_a_producer_and_a_worker_run_one_queue_under_their_acl_users(
    server: RedisProcess, tolerated: set[tuple[bytes, bytes]]
) -> None:
    worker = spawn_worker("kill_app:tasks", url(server, "worker"), env={"TEST_QUEUE": "orders"})
    try:
        with Queue("orders", url=url(server, "producer")) as queue:
            first = queue.enqueue("sleepy", {"seconds": 0})
            queue.enqueue_many([("sleepy", {"seconds": 0}) for _ in range(4)])
            assert queue.wait_result(first.id, timeout=60) == {"pid": worker.pid}
            wait_until(lambda: queue.counts()[JobState.COMPLETED] == 5, timeout=30)
        # the liveness probe of docs/deployment/index.md, with the worker's credentials
        with Queue("orders", url=url(server, "worker")) as as_worker:
            assert [w.info["pid"] for w in as_worker.workers()] == [worker.pid]
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.communicate(timeout=30)
    assert worker.returncode == 0
    with redis.Redis(port=server.port) as admin:
        denied = {(e[b"object"], e[b"reason"]) for e in admin.execute_command("ACL", "LOG")}
    # only what Conveyor tolerates: the queue registry (outside the queue's
    # keys) and CONFIG GET (the maxmemory-policy check)
    assert denied <= tolerated


@pytest.mark.parametrize("user", ["producer", "worker"])
def test_another_queue_can_be_neither_read_nor_written(server: RedisProcess, user: str) -> None:
    with Queue("billing", url=url(server, user)) as queue:
        with pytest.raises(ConfigurationError, match="lacks a permission"):
            queue.enqueue("sleepy", {"seconds": 0})
        with pytest.raises(ConfigurationError, match="lacks a permission"):
            queue.counts()
    with redis.Redis(port=server.port) as admin:
        assert admin.keys("conveyor:{billing}:*") == []  # nothing written


def test_a_worker_of_another_queue_is_refused(server: RedisProcess) -> None:
    worker = spawn_worker("kill_app:tasks", url(server, "worker"), env={"TEST_QUEUE": "billing"})
    output, _ = worker.communicate(timeout=60)
    assert worker.returncode == 2
    assert b"ConfigurationError" in output and b"permission" in output
    with redis.Redis(port=server.port) as admin:
        assert admin.keys("conveyor:{billing}:*") == []


async def test_a_read_only_dashboard_shows_the_queue_under_its_acl_user(
    server: RedisProcess, redis_binary: str
) -> None:
    """The dashboard's user reads the queue's keys only (`%R~`): every page
    of queue `orders` renders; nothing else is denied."""
    if server_version(redis_binary) < (7, 0, 0):
        pytest.skip("read-only key patterns (%R~) need Redis 7.0+")
    with redis.Redis(port=server.port) as admin:
        admin.execute_command("ACL", "SETUSER", *acl("dashboard", DASHBOARD, read_only=True))
    with Queue("orders", url=url(server, "producer")) as queue:
        job = queue.enqueue("sleepy", {"seconds": 0})
    settings = DashboardSettings(url=url(server, "dashboard"), queues=("orders",), read_only=True)
    app = dashboard_app(settings)
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://dash.test") as client:
            for page in (
                "/",
                "/queues/orders",
                "/queues/orders/jobs/waiting",
                "/queues/orders/jobs/completed",
                f"/queues/orders/job?id={job.id}",
                f"/queues/orders/search?q={job.id}",
                "/queues/orders/workers",
                "/queues/orders/schedules",
                "/metrics",
            ):
                response = await client.get(page)
                assert response.status_code == 200, (page, response.text[-500:])
    finally:
        await app.state.queues.close()
    with redis.Redis(port=server.port) as admin:
        denied = {(e[b"object"], e[b"reason"]) for e in admin.execute_command("ACL", "LOG")}
    assert denied <= TOLERATED, denied
    dashboard = Queue("orders", url=url(server, "dashboard"))
    with dashboard, pytest.raises(ConfigurationError, match="lacks a permission"):
        dashboard.enqueue("sleepy", {"seconds": 0})  # its user cannot write


def test_a_worker_whose_user_cannot_read_commands_still_reaps(server: RedisProcess) -> None:
    # A user left without ZMSCORE (an older ACL) loses an operator's quiet /
    # stop, not the heartbeat: expired leases are still reaped and re-run.
    with redis.Redis(port=server.port) as admin:
        admin.execute_command("ACL", "SETUSER", *acl("old", WORKER.replace(" zmscore", "")))
    env = {"TEST_QUEUE": "orders"}
    first = spawn_worker("kill_app:tasks", url(server, "worker"), "--lease", "1", env=env)
    second = None
    try:
        with Queue("orders", url=url(server, "producer")) as queue:
            job = queue.enqueue("sleepy", {"seconds": 2})
            wait_until(lambda: queue.counts()[JobState.ACTIVE] == 1, timeout=30)
            os.killpg(first.pid, signal.SIGKILL)
            first.communicate(timeout=10)
            second = spawn_worker("kill_app:tasks", url(server, "old"), "--lease", "1", env=env)
            assert queue.wait_result(job.id, timeout=60) is not None
            done = queue.get(job.id)
            assert done is not None and done.stalls == 1
    finally:
        for proc in (first, second):
            if proc is not None:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate(timeout=10)

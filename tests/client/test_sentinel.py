"""Redis Sentinel: redis+sentinel:// URLs, a failover followed by clients and
workers, and min_replicas (acknowledged writes that WAIT for replicas).

One deployment (a master, a replica, three sentinels on loopback) serves the
module; a test that fails over leaves it with another master, which is what
the next test finds through the sentinels."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from chaos.sentinel import Deployment
from click.testing import CliRunner

from conveyor import AsyncQueue, Queue
from conveyor.client.connection import check_url
from conveyor.client.models import QueueSettings
from conveyor.client.sentinel import parse_sentinel_url
from conveyor.client.tasks import Tasks
from conveyor.errors import ConfigurationError, ConnectionLostError, UnreplicatedWriteError
from conveyor.integrations.cli import main
from conveyor.job import JobState
from support.sentinel import start_deployment
from support.servers import ServerFactory
from support.workers import WorkerRunner


@pytest.fixture(scope="module")
def deployment(redis_binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    base = tmp_path_factory.mktemp("sentinel")
    factory = ServerFactory(binary=redis_binary, base_dir=base)
    try:
        yield start_deployment(factory, Path(base))
    finally:
        factory.stop_all()


@pytest.fixture(params=["1", "0"], ids=["lean-wire", "redis-py"])
def wire(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("CONVEYOR_WIRE", request.param)
    yield request.param


def _wait(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_sentinel_urls_name_sentinels_a_service_and_a_db() -> None:
    master, sentinels, service, ask = parse_sentinel_url(
        "rediss+sentinel://u:p%40ss@h1:26379,[::1]:26380/my-service/3?ssl_cert_reqs=none"
    )
    assert sentinels == [("h1", 26379), ("::1", 26380)]
    assert service == "my-service"
    assert master == "rediss://u:p%40ss@{address}/3?ssl_cert_reqs=none"
    assert ask == "rediss://{address}/0?ssl_cert_reqs=none"  # no credentials for sentinels
    assert parse_sentinel_url("redis+sentinel://h:1/s")[0] == "redis://{address}/0"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+sentinel://h:26379", "service name"),
        ("redis+sentinel://h:26379/", "service name"),
        ("redis+sentinel://h:26379/svc/notadb", "service name"),
        ("redis+sentinel://h:26379/svc/1/2", "service name"),
        ("redis+sentinel://h:port/svc", "host:port"),
        ("redis+sentinel://h/svc", "host:port"),
    ],
)
def test_a_malformed_sentinel_url_says_what_is_wrong(url: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=says):
        check_url(url)
    with pytest.raises(ConfigurationError, match=says):
        Queue("q", url=url)


def test_an_unknown_service_is_a_configuration_error(deployment: Deployment) -> None:
    url = deployment.url().replace("conveyor-test", "no-such-service")
    with Queue("q", url=url) as queue, pytest.raises(ConfigurationError, match="no-such-service"):
        queue.counts()


def test_no_reachable_sentinel_is_a_lost_connection(deployment: Deployment) -> None:
    url = "redis+sentinel://127.0.0.1:1/conveyor-test"
    with Queue("q", url=url) as queue, pytest.raises(ConnectionLostError, match="no sentinel"):
        queue.counts()


def test_jobs_go_to_the_master_and_run_through_a_sentinel_url(
    deployment: Deployment, wire: str
) -> None:
    url = deployment.url(db=2)
    name = f"basic{wire}"
    tasks = Tasks(name, url=url)

    @tasks.task
    def double(n: int) -> int:
        return n * 2

    runner = WorkerRunner(url)
    runner.start(tasks, concurrency=2, idle_wait=1.0)
    try:
        with Queue(name, url=url) as queue:
            job = queue.enqueue("double", 21)
            assert queue.wait_result(job.id, timeout=30) == 42

        async def through_async() -> object:
            async with AsyncQueue(name, url=url) as aqueue:
                done = await aqueue.enqueue("double", 5)
                return await aqueue.wait_result(done.id, timeout=30)

        assert asyncio.run(through_async()) == 10
    finally:
        runner.stop_all()
    with redis.Redis(port=deployment.master_port(), db=2) as master:
        assert master.exists(f"conveyor:{{{name}}}:job:{job.id}")


def test_min_replicas_waits_for_the_replica(deployment: Deployment, wire: str) -> None:
    """With min_replicas=1, an enqueue returns only once the replica has the
    job: with the replica stopped (SIGSTOP) for a second, the enqueue takes
    that second, and the job is on the replica the moment it returns."""
    replica = next(s for s in deployment.servers if s.port != deployment.master_port())
    settings = QueueSettings(min_replicas=1, replica_timeout=5.0)
    with Queue(f"durable{wire}", url=deployment.url(), settings=settings) as queue:
        queue.counts()  # connected, checked
        assert replica.pid is not None
        os.kill(replica.pid, signal.SIGSTOP)
        resume = threading.Timer(1.0, os.kill, (replica.pid, signal.SIGCONT))
        resume.start()
        try:
            started = time.monotonic()
            job = queue.enqueue("t", 1)
            took = time.monotonic() - started
        finally:
            resume.join()
        with redis.Redis(port=replica.port) as client:
            assert client.exists(f"conveyor:{{durable{wire}}}:job:{job.id}")
    assert took >= 0.8  # it waited for the replica to wake


def test_min_replicas_unmet_is_an_unreplicated_write(redis_url: str, wire: str) -> None:
    """A server with no replica can never confirm one: the enqueue is applied,
    re-sent (a no-op), and raises UnreplicatedWriteError, an UncertainWriteError."""
    settings = QueueSettings(min_replicas=1, replica_timeout=0.1)
    with Queue(f"unmet{wire}", url=redis_url, settings=settings) as queue:
        with pytest.raises(UnreplicatedWriteError, match="WAIT saw 0 replica"):
            queue.enqueue("t", 1, id="only")
        assert queue.get("only").state is JobState.WAITING  # applied, once
        assert queue.counts()[JobState.WAITING] == 1


def test_min_replicas_unmet_is_an_unreplicated_write_async(redis_url: str, wire: str) -> None:
    settings = QueueSettings(min_replicas=1, replica_timeout=0.1)

    async def enqueue() -> JobState:
        async with AsyncQueue(f"aunmet{wire}", url=redis_url, settings=settings) as queue:
            with pytest.raises(UnreplicatedWriteError, match="WAIT saw 0 replica"):
                await queue.enqueue("t", 1, id="only")
            return (await queue.get("only")).state

    assert asyncio.run(enqueue()) is JobState.WAITING


@pytest.mark.parametrize(
    "settings",
    [{"min_replicas": -1}, {"min_replicas": 1.5}, {"replica_timeout": 0}, {"replica_timeout": 9}],
)
def test_bad_replica_settings_are_refused(settings: dict[str, float]) -> None:
    with pytest.raises(ConfigurationError):
        QueueSettings(**settings)  # type: ignore[arg-type]


def test_clients_and_a_worker_follow_a_failover(deployment: Deployment, wire: str) -> None:
    """A producer (min_replicas=1) enqueues while a worker runs; SENTINEL
    FAILOVER promotes the replica: both follow it (READONLY on the demoted
    master, ROLE on new connections), and every acknowledged job runs."""
    url = deployment.url()
    name = f"fo{wire}"
    settings = QueueSettings(min_replicas=1, replica_timeout=2.0)
    tasks = Tasks(name, url=url, settings=settings)
    ran: set[int] = set()

    @tasks.task
    def work(n: int) -> int:
        ran.add(n)
        return n

    acknowledged: list[int] = []
    stop = threading.Event()

    def produce() -> None:
        with Queue(name, url=url, settings=settings) as queue:
            n = 0
            while not stop.is_set():
                try:
                    queue.enqueue("work", n, id=f"j{n}")
                    acknowledged.append(n)
                except ConnectionLostError:  # the failover: not acknowledged, try the next
                    time.sleep(0.05)
                n += 1

    runner = WorkerRunner(url)
    runner.start(tasks, concurrency=4, lease=3.0, idle_wait=1.0)
    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    old = deployment.master_port()
    try:
        _wait(lambda: len(acknowledged) >= 50)
        new = deployment.failover()
        before = len(acknowledged)
        _wait(lambda: len(acknowledged) >= before + 50)  # producing again, on the new master
        stop.set()
        producer.join(30)
        with Queue(name, url=url) as queue:
            _wait(lambda: queue.counts()[JobState.COMPLETED] >= len(acknowledged), timeout=90)
    finally:
        stop.set()
        runner.stop_all()
    assert new != old
    assert set(acknowledged) <= ran
    with redis.Redis(port=old) as demoted:
        assert demoted.execute_command("ROLE")[0] == b"slave"


def test_the_cli_takes_a_sentinel_url(deployment: Deployment) -> None:
    url = deployment.url(db=3)
    runner = CliRunner()
    done = runner.invoke(
        main, ["enqueue", "cli", "send", '{"to": "a"}', "--url", url, "--id", "c1"]
    )
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout) == {"id": "c1", "outcome": "created", "state": "waiting"}
    info = runner.invoke(main, ["info", "cli", "--url", url])
    assert info.exit_code == 0, info.output
    assert json.loads(info.output)["counts"]["waiting"] == 1
    with redis.Redis(port=deployment.master_port(), db=3) as master:
        assert master.exists("conveyor:{cli}:job:c1")


def test_one_worker_serves_several_queues_through_a_sentinel_url(deployment: Deployment) -> None:
    """Several queues per worker on Sentinel: no slot to share (unlike a
    cluster), one master for every queue."""
    url = deployment.url()
    high, low = Tasks("s-high", url=url), Tasks("s-low", url=url)

    @high.task
    def urgent(n: int) -> int:
        return n + 1

    @low.task
    def later(n: int) -> int:
        return n - 1

    runner = WorkerRunner(url)
    runner.start([high, low], concurrency=2, idle_wait=1.0)  # type: ignore[arg-type]
    try:
        with Queue("s-high", url=url) as first, Queue("s-low", url=url) as second:
            a, b = first.enqueue("urgent", 1), second.enqueue("later", 1)
            assert first.wait_result(a.id, timeout=30) == 2
            assert second.wait_result(b.id, timeout=30) == 0
    finally:
        runner.stop_all()

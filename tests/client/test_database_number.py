"""The database number of a Redis URL: one that is not a number, or that the server does not
have, is a ConfigurationError naming the URL (never its password), at construction or at the
first connection, for every call and the CLI, and never a silent fall back to database 0."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from conveyor import AsyncQueue, Queue
from conveyor.errors import ConfigurationError
from support.clients import AsyncFacade
from support.workers import SRC

CLI = [sys.executable, "-c", "from conveyor.integrations.cli import run; run()"]


def _out_of_range(url: str) -> str:
    return url.rsplit("/", 1)[0] + "/99"  # a server has 16 databases unless told otherwise


@pytest.fixture(params=["sync", "async"])
def make(request: pytest.FixtureRequest) -> Iterator[Callable[[str], Any]]:
    """Builds a Queue, or an AsyncQueue behind a sync facade, of `url`."""
    made: list[Any] = []

    def build(url: str) -> Any:
        if request.param == "sync":
            made.append(Queue("db-test", url=url))
        else:
            asyncio.run(_construct(url))  # a bad URL fails here, with no loop left behind
            made.append(AsyncFacade(lambda: AsyncQueue("db-test", url=url)))
        return made[-1]

    yield build
    for queue in made:
        queue.__exit__(None, None, None)


async def _construct(url: str) -> None:
    await AsyncQueue("db-test", url=url).close()


@pytest.mark.parametrize("call", ["enqueue", "counts", "known_queues", "enqueue again"])
def test_a_database_the_server_lacks_is_a_configuration_error(
    make: Callable[[str], Any], redis_url: str, call: str
) -> None:
    url = _out_of_range(redis_url)
    queue = make(url)
    calls = {
        "enqueue": lambda: queue.enqueue("t", 1),
        "counts": queue.counts,
        "known_queues": queue.known_queues,
        "enqueue again": lambda: queue.enqueue("t", 1),
    }
    attempts = 2 if call == "enqueue again" else 1  # a refused connection is not reused
    for _ in range(attempts):
        with pytest.raises(ConfigurationError) as caught:
            calls[call]()
        assert f"{url!r}: the server has no database 99" in str(caught.value)
    with redis.Redis.from_url(redis_url) as client:
        assert not client.keys("*db-test*")  # nothing landed in database 0


@pytest.mark.parametrize("path", ["/abc", "/0x1", "/-1", "/1/2"])
def test_a_database_that_is_not_a_number_is_refused_at_construction(
    make: Callable[[str], Any], redis_url: str, path: str
) -> None:
    url = redis_url.rsplit("/", 1)[0].replace("redis://", "redis://user:secret@") + path
    with pytest.raises(ConfigurationError) as caught:
        make(url)
    assert "is not a number" in str(caught.value)
    assert "secret" not in str(caught.value) and "user:***@" in str(caught.value)


def test_a_database_the_server_has_is_used(redis_url: str) -> None:
    url = redis_url.rsplit("/", 1)[0] + "/3"
    with Queue("db-three", url=url) as queue:
        queue.enqueue("t", 1)
        assert queue.known_queues() == ["db-three"]
    with redis.Redis.from_url(url) as three, redis.Redis.from_url(redis_url) as zero:
        assert three.keys("*db-three*") and not zero.keys("*db-three*")
        three.flushdb()


@pytest.mark.parametrize("command", [["queues"], ["info", "q"], ["enqueue", "q", "t"]])
@pytest.mark.parametrize("path", ["/99", "/abc"])
def test_the_cli_says_it_in_one_line(redis_url: str, command: list[str], path: str) -> None:
    url = redis_url.rsplit("/", 1)[0].replace("redis://", "redis://:secret@") + path
    proc = subprocess.run(
        [*CLI, *command, "--url", url],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "secret" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert ("no database 99" if path == "/99" else "'abc' is not a number") in proc.stderr

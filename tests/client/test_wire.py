"""The lean RESP wire the scripts run over: connections, auth, errors, reconnects."""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis import exceptions as rx

from conveyor import AsyncQueue, Queue
from conveyor.client.connection import wire_endpoint
from conveyor.client.endpoint import Endpoint
from conveyor.client.wire import AsyncWire, HandshakeError, SyncWire
from conveyor.errors import ConnectionLostError, OutOfMemoryError, UncertainWriteError
from support.servers import ServerFactory


def _endpoint(url: str) -> Endpoint:
    endpoint = wire_endpoint(url)
    assert endpoint is not None
    return endpoint


def test_urls_the_wire_takes_and_those_it_leaves_to_redis_py() -> None:
    tcp = _endpoint("redis://:pw@127.0.0.1:6390/3")
    assert (tcp.host, tcp.port, tcp.db, tcp.password, tcp.path) == (
        "127.0.0.1",
        6390,
        3,
        "pw",
        None,
    )
    unix = _endpoint("unix:///tmp/r.sock?db=2")
    assert (unix.path, unix.db, unix.host) == ("/tmp/r.sock", 2, None)
    assert wire_endpoint("rediss://127.0.0.1:6390/0") is None  # TLS: redis-py


def test_sync_wire_pipelines_and_maps_errors(redis_url: str) -> None:
    wire = SyncWire(_endpoint(redis_url))
    try:
        replies = wire.call_many(
            [("SET", "wire:a", "1"), ("INCR", "wire:a"), ("HGET", "wire:a", "x")]
        )
        assert replies[:2] == [b"OK", 2] and isinstance(replies[2], rx.ResponseError)
        with pytest.raises(rx.NoScriptError):
            wire.call("EVALSHA", "0" * 40, 0)
        assert wire.call("DEL", "wire:a") == 1
    finally:
        wire.close()


def test_auth_and_database_selection(server_factory: ServerFactory) -> None:
    server = server_factory(extra_args=["--requirepass", "s3cret"])
    url = server.url.replace("redis://", "redis://:s3cret@").rsplit("/", 1)[0] + "/5"
    wire = SyncWire(_endpoint(url))
    wire.call("SET", "k", "v")
    wire.close()
    direct = redis.Redis.from_url(url)
    assert direct.get("k") == b"v" and direct.dbsize() == 1
    assert redis.Redis.from_url(url.rsplit("/", 1)[0] + "/0").dbsize() == 0
    bad = SyncWire(_endpoint(url.replace("s3cret", "nope")))
    with pytest.raises(rx.AuthenticationError):
        bad.call("PING")


def test_the_wire_reconnects_after_a_restart(server_factory: ServerFactory) -> None:
    server = server_factory(appendonly=True)
    with Queue("q", url=server.url) as queue:
        queue.enqueue("t", None, id="before")
        server.restart()
        queue.enqueue("t", None, id="after")  # a lost connection is re-made on the next call
        assert {queue.get("before") is not None, queue.get("after") is not None} == {True}


def test_async_wire_pipelines_concurrent_callers(redis_url: str) -> None:
    async def main() -> list[int]:
        wire = AsyncWire(_endpoint(redis_url))
        try:
            replies = await asyncio.gather(*(wire.call("INCR", "wire:n") for _ in range(200)))
            await wire.call("DEL", "wire:n")
            return list(replies)
        finally:
            await wire.close()

    assert sorted(asyncio.run(main())) == list(range(1, 201))


def test_errors_over_the_wire_become_conveyor_errors(server_factory: ServerFactory) -> None:
    server = server_factory(extra_args=["--maxmemory-policy", "noeviction"])
    direct = redis.Redis.from_url(server.url)
    with Queue("q", url=server.url) as queue:
        queue.enqueue("t", None)
        direct.set("filler", "x" * 3_000_000)
        direct.config_set("maxmemory", 1_000_000)
        with pytest.raises(OutOfMemoryError):
            queue.enqueue("t", None)


def test_a_lost_connection_fails_every_pipelined_caller_quietly(
    server_factory: ServerFactory,
) -> None:
    server = server_factory()

    async def main() -> list[object]:
        wire = AsyncWire(_endpoint(server.url))
        await wire.call("PING")
        pending = asyncio.ensure_future(
            wire.call_many([("BLPOP", "never", 5), ("PING",), ("PING",)])
        )
        await asyncio.sleep(0.1)
        killer = redis.Redis.from_url(server.url)
        killer.client_kill_filter(skipme=True)  # drop the wire's connection
        killer.close()
        with pytest.raises(rx.ConnectionError):
            await pending
        return await wire.call_many([("PING",)])  # and the next call reconnects

    loop = asyncio.new_event_loop()
    unretrieved: list[object] = []
    loop.set_exception_handler(lambda _loop, context: unretrieved.append(context))
    try:
        assert loop.run_until_complete(main()) == [b"PONG"]
        import gc

        gc.collect()
        loop.run_until_complete(asyncio.sleep(0))
    finally:
        loop.close()
    assert unretrieved == []  # no "Future exception was never retrieved"


def test_clients_and_workers_over_a_unix_socket(tmp_path: object) -> None:
    import tempfile

    from conveyor import AsyncQueue, JobState
    from conveyor.client.tasks import Tasks
    from conveyor.integrations.embedded import EmbeddedRedis
    from conveyor.worker import Worker, WorkerSettings

    with EmbeddedRedis(data_dir=tempfile.mkdtemp(prefix="cv-")) as embedded:
        assert embedded.url.startswith("unix://")
        tasks = Tasks("sock", url=embedded.url)

        @tasks.task
        async def double(data: int) -> int:
            return data * 2

        job = double.enqueue(21)

        async def from_asyncio() -> int:
            async with AsyncQueue("sock", url=embedded.url) as aq:
                return len(await aq.job_ids("waiting"))

        assert asyncio.run(from_asyncio()) == 1
        Worker(tasks, settings=WorkerSettings(burst=True)).run_sync()
        queue = tasks.queue()
        assert queue.wait_result(job.id, timeout=5) == 42
        assert queue.counts()[JobState.COMPLETED] == 1
        queue.close()


class HangUpServer:
    """A port that reads what a client sends and resets the connection, as
    a TLS port does with plaintext: nothing is ever applied."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port: int = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.recv(1024)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()  # linger 0: a reset, like a TLS server refusing the handshake

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def hang_up() -> Iterator[HangUpServer]:
    server = HangUpServer()
    yield server
    server.close()


@pytest.mark.parametrize("lean_wire", ["1", "0"])
@pytest.mark.parametrize("auth", [False, True])
def test_a_port_that_resets_the_handshake_is_a_connection_error(
    hang_up: HangUpServer, monkeypatch: pytest.MonkeyPatch, lean_wire: str, auth: bool
) -> None:
    """B12: plaintext to a TLS port. Nothing but the handshake was sent, so
    ConnectionLostError (nothing applied), never UncertainWriteError, fast."""
    monkeypatch.setenv("CONVEYOR_WIRE", lean_wire)
    url = f"redis://{'app:pw@' if auth else ''}127.0.0.1:{hang_up.port}/0"

    async def enqueue_async() -> None:
        async with AsyncQueue("q", url=url) as queue:
            await queue.enqueue("t", 1)

    for attempt in (
        lambda: Queue("q", url=url).enqueue("t", 1),
        lambda: asyncio.run(enqueue_async()),
    ):
        t0 = time.monotonic()
        with pytest.raises(ConnectionLostError) as caught:
            attempt()
        assert not isinstance(caught.value, UncertainWriteError)
        assert "handshake" in str(caught.value) and "TLS" in str(caught.value)
        assert time.monotonic() - t0 < 2.0
    assert hang_up.accepted >= 2


def test_the_wire_reports_a_reset_handshake_as_such(hang_up: HangUpServer) -> None:
    endpoint = _endpoint(f"redis://127.0.0.1:{hang_up.port}/0")
    wire = SyncWire(endpoint)
    with pytest.raises(HandshakeError, match="during the handshake"):
        wire.call("PING")

    async def main() -> None:
        awire = AsyncWire(endpoint)
        with pytest.raises(HandshakeError, match="during the handshake"):
            await awire.call("PING")
        await awire.close()

    asyncio.run(main())


def test_a_reply_that_does_not_come_times_out_then_the_wire_reconnects(redis_url: str) -> None:
    """The sync wire's sockets block in the kernel with SO_RCVTIMEO (no poll per
    call): a reply slower than socket_timeout still ends the call in time."""
    wire = SyncWire(Endpoint.from_url(redis_url, connect_timeout=5.0, socket_timeout=0.3))
    spin = _spin(1000)  # busy for 1 s on the server
    try:
        started = time.monotonic()
        with pytest.raises(rx.TimeoutError):
            wire.call("EVAL", spin, 0)
        assert 0.25 < time.monotonic() - started < 0.9
        time.sleep(1.0)  # the script ends; the next call connects again
        assert wire.call("PING") == b"PONG"
    finally:
        wire.close()


def _spin(ms: int) -> str:
    """A script that keeps the server busy for `ms` milliseconds of `TIME`, or
    of `os.clock` (the server's CPU time, which a spinning script spends) if that
    comes first: Valkey 9 gives a script one `TIME` for its whole run, and Redis
    6.2 has no `os` in scripts. On a loaded machine CPU time lags the clock, so
    where `TIME` moves it decides."""
    return (
        "local os_lib = rawget(_G, 'os') local clock = os_lib and os_lib.clock "
        "local c0 = clock and clock() local t = redis.call('TIME') "
        "local start = t[1] * 1e6 + t[2] repeat t = redis.call('TIME') "
        f"until t[1] * 1e6 + t[2] - start > {ms * 1000} "
        f"or (clock and clock() - c0 > {ms / 1000}) return 1"
    )


def test_the_async_wire_times_out_every_caller_whose_reply_does_not_come(redis_url: str) -> None:
    """One watchdog per connection, not a timer per call: a reply slower than
    socket_timeout fails its caller and those pipelined behind it in time,
    and the next call connects again."""

    async def main() -> float:
        wire = AsyncWire(Endpoint.from_url(redis_url, connect_timeout=5.0, socket_timeout=0.3))
        try:
            await wire.call("PING")
            started = time.monotonic()
            slow = asyncio.ensure_future(wire.call("EVAL", _spin(1000), 0))
            behind = asyncio.ensure_future(wire.call("PING"))
            with pytest.raises(rx.TimeoutError):
                await slow
            with pytest.raises(rx.TimeoutError):
                await behind
            elapsed = time.monotonic() - started
            await asyncio.sleep(1.0)  # the script ends; the next call connects again
            assert await wire.call("PING") == b"PONG"
            return elapsed
        finally:
            await wire.close()

    assert 0.25 < asyncio.run(main()) < 0.9


def test_the_async_watchdog_bounds_each_reply_not_the_connection(redis_url: str) -> None:
    """Calls that each answer within socket_timeout never time out, however
    long they keep coming (the watchdog moves on to the oldest waiter)."""

    async def main() -> int:
        wire = AsyncWire(Endpoint.from_url(redis_url, connect_timeout=5.0, socket_timeout=0.3))
        try:
            calls = 0
            started = time.monotonic()
            while time.monotonic() - started < 1.0:  # 3x the timeout in all
                assert await wire.call("EVAL", _spin(150), 0) == 1
                calls += 1
            return calls
        finally:
            await wire.close()

    assert asyncio.run(main()) >= 4


@pytest.mark.skipif(sys.platform == "win32", reason="uvloop has no Windows build")
def test_the_async_client_and_worker_run_on_uvloop(redis_url: str) -> None:
    """uvloop's transports are not asyncio.Transport subclasses: the wire
    must not require that (uvicorn runs applications on uvloop by default)."""
    import uvloop

    from conveyor.client.tasks import Tasks
    from conveyor.worker.runtime import Worker, WorkerSettings

    tasks = Tasks("uv", url=redis_url)

    @tasks.task
    async def double(n: int) -> int:
        return 2 * n

    async def main() -> tuple[Any, Any]:
        assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
        queue = AsyncQueue("uv", url=redis_url)
        worker = Worker(tasks, settings=WorkerSettings(concurrency=2, idle_wait=0.5))
        running = asyncio.ensure_future(worker.run())
        try:
            job = await queue.enqueue("double", 21)
            result = await queue.wait_result(job.id, timeout=10)
            record = await queue.get(job.id)
            return result, record
        finally:
            worker.stop()
            await running
            await queue.close()

    result, record = uvloop.run(main())
    assert result == 42
    assert record is not None and record.state.value == "completed"

"""A delay line between the clients and Redis: every byte arrives `delay` seconds late.

The network scenarios (`*_net`) put it between every client of the library (producers and
workers) and the queue server, so each round trip costs about 2 x `delay` more, as across a
real network. Unlike `chaos/proxy.py`'s latency fault, which waits before forwarding each
chunk and so lets one chunk per delay through, this is a pipe: each chunk is stamped when it
arrives and written out when its time comes, while the chunks behind it keep arriving, in
order. Throughput is not limited by the delay, only each round trip.

It runs asyncio's own loop on a thread of its own, in the harness's process (uvloop's timers
gave 6.4 ms round trips for 1 ms each way here, asyncio's 2.6 ms; the harness records the
round trip it measured through the proxy in the report's meta). The harness's own
measurements (INFO, the marks) go to Redis directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque

_LOOPBACK = "127.0.0.1"
_CHUNK = 65536


class DelayProxy:
    def __init__(self, upstream_port: int, delay: float) -> None:
        self.upstream_port = upstream_port
        self.delay = delay
        self.port = 0
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self._run, name="bench-netproxy", daemon=True)
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        return f"redis://{_LOOPBACK}:{self.port}/0"

    def start(self) -> DelayProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the delay proxy did not start")
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> DelayProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._open())
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _open(self) -> None:
        self._server = await asyncio.start_server(self._accept, _LOOPBACK, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        await asyncio.sleep(0.05)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(_LOOPBACK, self.upstream_port)
        except OSError:
            writer.transport.abort()
            return
        self.connections += 1
        self._writers |= {writer, up_writer}
        await asyncio.gather(
            self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
        )
        for w in (writer, up_writer):
            self._writers.discard(w)
            w.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read as fast as bytes come; write each chunk `delay` after it arrived."""
        line: deque[tuple[float, bytes]] = deque()
        arrived = asyncio.Event()
        done = False

        async def send() -> None:
            while line or not done:
                if not line:
                    arrived.clear()
                    await arrived.wait()
                    continue
                due, _ = line[0]
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                now = time.monotonic()
                while line and line[0][0] <= now:
                    writer.write(line.popleft()[1])
                await writer.drain()

        sender = asyncio.create_task(send())
        try:
            while True:
                chunk = await reader.read(_CHUNK)
                if not chunk:
                    break
                line.append((time.monotonic() + self.delay, chunk))
                arrived.set()
        except (ConnectionError, OSError):
            pass
        finally:
            done = True
            arrived.set()
            with contextlib.suppress(ConnectionError, OSError, asyncio.CancelledError):
                await sender
            with contextlib.suppress(ConnectionError, OSError):
                writer.write_eof()


def round_trip_ms(url: str, calls: int = 200) -> float:
    """Median PING round trip through `url`, in ms (for the report's meta)."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.ping()
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            client.ping()
            times.append((time.perf_counter() - start) * 1000)
    finally:
        client.close()
    times.sort()
    return times[len(times) // 2]

"""A delay line between the clients and Redis: every byte arrives `delay` seconds late.

The network scenarios (`*_net`) put it between every client of the library (producers and
workers) and the queue server, so each round trip costs about 2 x `delay` more, as across a
real network. Unlike `chaos/proxy.py`'s latency fault, which waits before forwarding each
chunk and so lets one chunk per delay through, this is a pipe: each chunk is stamped when it
arrives and written out when its time comes, while the chunks behind it keep arriving, in
order. Throughput is not limited by the delay, only each round trip.

It runs asyncio's own loop on a thread of its own, in the harness's process, on the
`select()` selector: epoll, asyncio's default on Linux, takes timeouts in whole milliseconds
rounded up, so a chunk due 0.3 ms after another waited a whole millisecond more. A sleep
also ends later than asked (the timer's wake-up and the loop's turn: 0.12-0.16 ms here), so
each sleep is cut by that overshoot, measured when the proxy starts. Without either, each
hop cost 1.15-1.2 ms instead of 1 ms; with both, a PING's round trip is 2.15-2.2 ms (direct:
about 0.1 ms). uvloop's timers gave 6.4 ms round trips. The harness records the round trip it measured through the proxy in the
report's meta. The harness's own measurements (INFO, the marks) go to Redis directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
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
        self.early = 0.0  # how much sooner than due a sender's sleep ends (calibrated in _open)
        # select() takes its timeout in microseconds; epoll, asyncio's default on Linux,
        # in whole milliseconds rounded up, so a 0.9 ms wait there lasts 1 ms or more
        self._loop = asyncio.SelectorEventLoop(selectors.SelectSelector())
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
        self.early = min(await _overshoot(), self.delay / 2)

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
                wait = due - self.early - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                horizon = time.monotonic() + self.early  # due before the next wake-up could be
                while line and line[0][0] <= horizon:
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


async def _overshoot(samples: int = 21) -> float:
    """The median time a short `asyncio.sleep` lasts beyond what it asked on this
    machine (the timer's wake-up, the loop's turn; about 0.12-0.16 ms here): each
    chunk's sleep is cut by it, so that a chunk leaves `delay` after it came in,
    not `delay` plus the overshoot."""
    late = []
    for _ in range(samples):
        start = time.monotonic()
        await asyncio.sleep(0.001)
        late.append(time.monotonic() - start - 0.001)
    late.sort()
    return max(0.0, late[len(late) // 2])


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

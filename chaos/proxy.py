"""A small TCP fault proxy between clients and Redis, on 127.0.0.1 only.

It forwards bytes both ways and, on request, injects:

* latency: every chunk waits a random delay in [low, high] seconds (order kept);
* resets: connections torn down with a TCP RST (``SO_LINGER`` 0), mid-command or idle;
* stalls: no byte moves in either direction for a while (a frozen network or a
  half-open connection), then everything queued flows again;
* lost replies: with some probability a reply from Redis is dropped and the connection
  reset instead, so the command was applied but its sender never hears so.

It runs an asyncio loop on a thread of its own; the fault methods are thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
from dataclasses import dataclass, field

_LOOPBACK = "127.0.0.1"
_CHUNK = 65536
_MAX_CHUNKS = 100_000_000  # per direction of one connection: a bound, never reached in a run


@dataclass(eq=False)
class _Link:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class FaultProxy:
    def __init__(self, upstream_port: int, *, seed: int = 0) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.rng = random.Random(seed)
        self.latency = (0.0, 0.0)
        self.reply_loss = 0.0
        self.replies_cut = 0
        self.resets = 0
        self.stalls = 0
        self.connections = 0
        self._links: set[_Link] = set()
        self._loop = asyncio.new_event_loop()
        self._flowing: asyncio.Event | None = None
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._ready = threading.Event()

    # --------------------------------------------------------------- lifecycle

    def start(self) -> int:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fault proxy did not start")
        return self.port

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"redis://{_LOOPBACK}:{self.port}/0"

    # --------------------------------------------------------------- faults

    def set_latency(self, low: float, high: float) -> None:
        self.latency = (low, high)

    def lose_replies(self, probability: float) -> None:
        """From now on, drop each reply with this probability (and reset its connection)."""
        self.reply_loss = probability

    def reset(self, fraction: float = 1.0) -> int:
        """RST a random `fraction` of the open connections; returns how many."""
        future = asyncio.run_coroutine_threadsafe(self._reset(fraction), self._loop)
        return future.result(10)

    def stall(self, seconds: float) -> None:
        """Freeze every connection for `seconds` (returns at once)."""
        self.stalls += 1
        self._loop.call_soon_threadsafe(self._stall, seconds)

    # --------------------------------------------------------------- internals

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._open())
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _open(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = await asyncio.start_server(self._accept, _LOOPBACK, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            self._abort(link)
        await asyncio.sleep(0.05)  # let the aborted links' handlers return

    def _stall(self, seconds: float) -> None:
        assert self._flowing is not None
        self._flowing.clear()
        self._loop.call_later(seconds, self._flowing.set)

    async def _reset(self, fraction: float) -> int:
        links = [link for link in self._links if self.rng.random() < fraction]
        for link in links:
            self._abort(link)
        self.resets += len(links)
        return len(links)

    def _abort(self, link: _Link) -> None:
        for writer in (link.client, link.upstream):
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        for task in link.tasks:
            task.cancel()
        self._links.discard(link)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(_LOOPBACK, self.upstream_port)
        except OSError:
            writer.transport.abort()
            return
        self.connections += 1
        link = _Link(writer, up_writer)
        self._links.add(link)
        link.tasks = [
            asyncio.create_task(self._pump(reader, up_writer, link, replies=False)),
            asyncio.create_task(self._pump(up_reader, writer, link, replies=True)),
        ]
        await asyncio.gather(*link.tasks, return_exceptions=True)
        if link in self._links:
            self._links.discard(link)
            for w in (writer, up_writer):
                w.close()

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        link: _Link,
        *,
        replies: bool,
    ) -> None:
        assert self._flowing is not None
        try:
            for _ in range(_MAX_CHUNKS):  # ends when the peer closes or the link is aborted
                chunk = await reader.read(_CHUNK)
                if not chunk:
                    break
                low, high = self.latency
                if high > 0:
                    await asyncio.sleep(self.rng.uniform(low, high))
                await self._flowing.wait()
                if replies and self.reply_loss and self.rng.random() < self.reply_loss:
                    self.replies_cut += 1
                    self._abort(link)  # the command ran; its reply never arrives
                    return
                writer.write(chunk)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            for task in link.tasks:
                if task is not asyncio.current_task():
                    task.cancel()

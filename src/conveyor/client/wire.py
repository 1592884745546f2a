"""A lean RESP connection for the hot path: scripts, sent and parsed with hiredis.

redis-py spends most of a round trip in Python (pools, retries, option
parsing): measured here, one sync connection makes about 15k EVALSHA/s
through redis-py and about 55k/s through a socket and a hiredis Reader, and
`redis.asyncio` is slower still. Conveyor's scripts run over this wire when
the URL allows (TCP or unix socket, optional AUTH and database); TLS and
anything else falls back to redis-py. Errors are raised as redis-py's
exception classes, so one translation (transport.translate) covers both.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import socket
import struct
import sys
import threading
from collections.abc import Awaitable, Sequence
from typing import Any, cast

import hiredis
from redis import exceptions as rx

from conveyor.client.endpoint import Command, Endpoint

_ERRORS: tuple[tuple[str, type[rx.RedisError]], ...] = (
    ("NOSCRIPT", rx.NoScriptError),
    ("OOM", rx.OutOfMemoryError),
    ("NOPERM", rx.NoPermissionError),
    ("NOAUTH", rx.AuthenticationError),
    ("WRONGPASS", rx.AuthenticationError),
    ("LOADING", rx.BusyLoadingError),
    ("READONLY", rx.ReadOnlyError),
)
# A cluster's refusals: redis-py strips the prefix from these; so do we.
_CLUSTER_ERRORS: tuple[tuple[str, type[rx.RedisError]], ...] = (
    ("MOVED ", rx.MovedError),
    ("ASK ", rx.AskError),
    ("TRYAGAIN ", rx.TryAgainError),
    ("CLUSTERDOWN ", rx.ClusterDownError),
)


class HandshakeError(rx.ConnectionError):
    """The connection closed (or broke) before its handshake got a reply:
    nothing was sent but the handshake, so nothing was applied."""


# Addresses where a handshake has succeeded in this process. A handshake that
# then fails there is a network fault or a restarting server, not a port that
# does not speak Redis: the error must not send the reader looking for TLS.
_ANSWERED: set[str] = set()


def handshake_answered(address: str) -> None:
    """Note that `address` completed a handshake (it is a plaintext Redis)."""
    _ANSWERED.add(address)


def handshake_error(address: str, exc: Exception) -> HandshakeError:
    """What happened to a handshake that got no reply, said plainly: reset,
    closed or timed out, and whether the address had answered before."""
    text = str(exc)
    if isinstance(exc, rx.TimeoutError):
        what = "the handshake got no reply in time"
    elif "reset by peer" in text.lower() or isinstance(exc.__cause__, ConnectionResetError):
        what = "the connection was reset during the handshake"
    else:
        what = "the connection closed during the handshake"
    if address in _ANSWERED:
        hint = (
            "This address answered before: the network or a restarting Redis dropped the "
            "connection. Nothing but the handshake was sent."
        )
    else:
        hint = "Is this a TLS port (use rediss://), or not Redis at all?"
    return HandshakeError(f"Error connecting to Redis at {address}: {what} ({exc}). {hint}")


def error_of(reply: hiredis.ReplyError) -> rx.RedisError:
    """A server error reply as the redis-py exception for it."""
    message = str(reply)
    for prefix, kind in _ERRORS:
        if message.startswith(prefix):
            return kind(message)
    for prefix, kind in _CLUSTER_ERRORS:
        if message.startswith(prefix):
            return kind(message[len(prefix) :])
    if message.startswith("ERR "):
        message = message[4:]
    return rx.ResponseError(message)


def _set_io_timeout(sock: socket.socket, timeout: float | None) -> None:
    """A blocking socket whose reads and writes time out in the kernel.

    `settimeout` would make Python poll() before every send and recv: measured
    here, that costs about 25 µs of CPU and 30-60 µs of wall time per round
    trip. SO_RCVTIMEO / SO_SNDTIMEO give the same bound without it (a read or
    write past it fails with EAGAIN, raised as BlockingIOError)."""
    if timeout is None or timeout <= 0 or sys.platform == "win32":  # Windows: another format
        sock.settimeout(timeout)
        return
    sock.settimeout(None)
    seconds = int(timeout)
    when = struct.pack("@ll", seconds, int((timeout - seconds) * 1_000_000))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, when)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, when)


# A long pipeline goes out in slices of about this many bytes: Redis starts on
# the first commands while the rest are still being packed.
SEND_SLICE = 64 * 1024


def _send_in_slices(sock: socket.socket, commands: Sequence[Command] | bytes) -> None:
    """Commands, or one command packed beforehand (bytes)."""
    if isinstance(commands, bytes):
        sock.sendall(commands)
        return
    if len(commands) == 1:
        sock.sendall(hiredis.pack_command(tuple(commands[0])))
        return
    pending: list[bytes] = []
    size = 0
    for command in commands:
        packed = hiredis.pack_command(tuple(command))
        pending.append(packed)
        size += len(packed)
        if size >= SEND_SLICE:
            sock.sendall(b"".join(pending))
            pending.clear()
            size = 0
    if pending:
        sock.sendall(b"".join(pending))


class SyncWire:
    """Blocking RESP over one socket, shared by threads under a lock."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._sock: socket.socket | None = None
        self._reader = hiredis.Reader()
        self._lock = threading.Lock()

    def _connect(self) -> socket.socket:
        e = self.endpoint
        where = e.path
        try:
            if e.path is not None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(e.connect_timeout)
                sock.connect(e.path)
            else:
                host, port = e.address()
                where = f"{host}:{port}"
                sock = socket.create_connection((host, port), timeout=e.connect_timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            _set_io_timeout(sock, e.socket_timeout)
        except OSError as exc:
            if e.route is not None:
                e.route.forget()  # a failover, maybe: ask the cluster again next time
            raise rx.ConnectionError(f"Error connecting to Redis: {exc}") from exc
        self._sock, self._reader = sock, hiredis.Reader()
        try:
            handshake = e.handshake()
            replies = self._exchange(handshake, len(handshake))
        except (rx.ConnectionError, rx.TimeoutError) as exc:
            raise handshake_error(str(where), exc) from exc
        for reply in replies[:-1]:  # any reply to the PING will do, even a refusal
            if isinstance(reply, rx.RedisError):
                self.close()
                raise reply
        handshake_answered(str(where))
        return sock

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __del__(self) -> None:  # an unclosed client must not leak its socket
        self.close()

    def call(self, *args: Any) -> Any:
        reply = self.call_many([args])[0]
        if isinstance(reply, rx.RedisError):
            raise reply
        return reply

    def call_many(self, commands: Sequence[Command]) -> list[Any]:
        """Pipelined; error replies are returned in place, not raised."""
        return self._call(commands, len(commands))

    def call_packed(self, packed: bytes) -> Any:
        """One command packed beforehand (client/resp.py); an error reply is
        returned, not raised."""
        return self._call(packed, 1)[0]

    def _call(self, commands: Sequence[Command] | bytes, count: int) -> list[Any]:
        with self._lock:
            if self._sock is None:
                self._connect()
            replies = self._exchange(commands, count)
            if self.endpoint.follow(replies):
                self.close()  # the slot moved: the next call connects to its new master
            return replies

    def _exchange(self, commands: Sequence[Command] | bytes, count: int) -> list[Any]:
        if not count:
            return []
        sock = self._sock
        assert sock is not None
        try:
            _send_in_slices(sock, commands)
            replies: list[Any] = []
            while len(replies) < count:
                reply = self._reader.gets()
                if reply is False:
                    data = sock.recv(65536)
                    if not data:
                        raise rx.ConnectionError("Connection closed by server.")
                    self._reader.feed(data)
                    continue
                replies.append(error_of(reply) if isinstance(reply, hiredis.ReplyError) else reply)
            return replies
        except (TimeoutError, BlockingIOError) as exc:  # BlockingIOError: SO_RCVTIMEO ran out
            self.close()
            raise rx.TimeoutError(f"Timeout reading from Redis: {exc}") from exc
        except (OSError, hiredis.ProtocolError) as exc:
            self.close()
            raise rx.ConnectionError(f"Error while reading from Redis: {exc}") from exc
        except rx.ConnectionError:
            self.close()
            raise


# The buffer replies are read into. asyncio's plain Protocol would get a new
# bytes object per read, which its selector loop allocates at 256 KiB: that
# allocation alone cost 13 µs per read here (recv(262144) 15.7 µs against
# recv_into 2.1 µs on a socketpair).
READ_BUFFER = 64 * 1024


class _Protocol(asyncio.BufferedProtocol):
    """Replies arrive in request order: each resolves the oldest waiter.

    One watchdog timer per connection bounds how long a reply may take, not a
    timer per call (an `asyncio.timeout` costs a few µs a call): it fires at
    the oldest waiter's deadline, and while replies keep coming it only moves
    on to the next oldest."""

    def __init__(self) -> None:
        self.reader = hiredis.Reader()
        self._buffer = memoryview(bytearray(READ_BUFFER))
        self.waiters: collections.deque[asyncio.Future[Any]] = collections.deque()
        self.deadlines: collections.deque[float] = collections.deque()  # one per waiter
        self.transport: asyncio.Transport | None = None
        self.lost: Exception | None = None
        self._watchdog: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # not isinstance(..., asyncio.Transport): uvloop's transports do not subclass it
        self.transport = cast(asyncio.Transport, transport)

    def send(self, commands: Sequence[Command], timeout: float | None) -> list[asyncio.Future[Any]]:
        """Writes the commands; returns the waiters of their replies."""
        loop = asyncio.get_running_loop()
        deadline = self._deadline(loop, timeout)
        waiters = [loop.create_future() for _ in commands]
        self.waiters.extend(waiters)
        self.deadlines.extend([deadline] * len(waiters))
        assert self.transport is not None
        self.transport.write(b"".join([hiredis.pack_command(tuple(c)) for c in commands]))
        return waiters

    def send_packed(self, packed: bytes, timeout: float | None) -> asyncio.Future[Any]:
        """Writes one command packed beforehand; returns the waiter of its reply."""
        loop = asyncio.get_running_loop()
        deadline = self._deadline(loop, timeout)
        waiter = loop.create_future()
        self.waiters.append(waiter)
        self.deadlines.append(deadline)
        assert self.transport is not None
        self.transport.write(packed)
        return waiter

    def _deadline(self, loop: asyncio.AbstractEventLoop, timeout: float | None) -> float:
        """When a reply sent now is late; arms the watchdog if it is idle."""
        deadline = math.inf if timeout is None else loop.time() + timeout
        if self._watchdog is None and deadline != math.inf:
            self._watchdog = loop.call_at(deadline, self._check_deadline)
        return deadline

    def _check_deadline(self) -> None:
        self._watchdog = None
        if not self.deadlines or self.deadlines[0] == math.inf:
            return  # all answered: the next send arms it again
        oldest = self.deadlines[0]
        loop = asyncio.get_running_loop()
        if loop.time() >= oldest:
            # replies would now arrive out of step: this connection is done
            self.fail(rx.TimeoutError("Timeout reading from Redis"))
        else:
            self._watchdog = loop.call_at(oldest, self._check_deadline)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        # hiredis copies what it is fed; it takes any buffer (its stub says bytes)
        self.reader.feed(self._buffer, 0, nbytes)  # type: ignore[arg-type]
        self._resolve_waiters()

    def _resolve_waiters(self) -> None:
        while True:
            try:
                reply = self.reader.gets()
            except hiredis.ProtocolError as exc:
                self.fail(rx.ConnectionError(f"Protocol error from Redis: {exc}"))
                return
            if reply is False:
                return
            if isinstance(reply, hiredis.ReplyError):
                reply = error_of(reply)
            self.deadlines.popleft()
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(rx.ConnectionError(f"Connection to Redis lost: {exc or 'closed by server'}"))

    def fail(self, error: Exception) -> None:
        self.lost = error
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        self.deadlines.clear()
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_exception(error)
        if self.transport is not None:
            self.transport.close()


class AsyncWire:
    """RESP over one asyncio connection; concurrent callers are pipelined."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Lock | None = None

    async def _connect(self) -> _Protocol:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._protocol is not None and self._protocol.lost is None:
                return self._protocol
            e = self.endpoint
            loop = asyncio.get_running_loop()
            where = e.path
            try:
                if e.path is not None:
                    connect = loop.create_unix_connection(_Protocol, e.path)
                else:
                    host, port = await self._address()
                    where = f"{host}:{port}"
                    connect = loop.create_connection(_Protocol, host, port)
                transport, protocol = await asyncio.wait_for(connect, e.connect_timeout)
            except (OSError, TimeoutError) as exc:
                if e.route is not None:
                    e.route.forget()  # a failover, maybe: ask the cluster again next time
                raise rx.ConnectionError(f"Error connecting to Redis: {exc}") from exc
            sock = transport.get_extra_info("socket")
            if sock is not None and e.path is None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                replies = await _replies(protocol.send(e.handshake(), e.socket_timeout))
            except (rx.ConnectionError, rx.TimeoutError) as exc:
                transport.close()
                raise handshake_error(str(where), exc) from exc
            for reply in replies[:-1]:  # any reply to the PING will do, even a refusal
                if isinstance(reply, rx.RedisError):
                    transport.close()
                    raise reply
            handshake_answered(str(where))
            self._protocol = protocol
            return protocol

    async def _address(self) -> tuple[str, int]:
        """Asking a cluster where the slot is blocks: not on the event loop."""
        route = self.endpoint.route
        if route is not None and route.cached is None:
            return await asyncio.to_thread(route.address)
        return self.endpoint.address()

    async def close(self) -> None:
        self._close()

    def _close(self) -> None:
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
        self._protocol = None

    def __del__(self) -> None:  # an unclosed client must not leak its transport
        with contextlib.suppress(RuntimeError):  # its loop is already closed
            self._close()

    async def call(self, *args: Any) -> Any:
        reply = (await self.call_many([args]))[0]
        if isinstance(reply, rx.RedisError):
            raise reply
        return reply

    async def call_many(self, commands: Sequence[Command]) -> list[Any]:
        if not commands:
            return []
        protocol = self._protocol
        if protocol is None or protocol.lost is not None:
            protocol = await self._connect()
        waiters = protocol.send(commands, self.endpoint.socket_timeout)
        # one waiter is awaited here, so its exception (if any) is retrieved
        replies = [await waiters[0]] if len(waiters) == 1 else await _replies(waiters)
        return self._followed(protocol, replies)

    def call_packed(self, packed: bytes) -> Awaitable[Any]:
        """One command packed beforehand (client/resp.py); an error reply is
        returned, not raised. Written at once on a live connection outside a
        cluster, and its reply's future returned: a coroutine less per call."""
        protocol = self._protocol
        if protocol is None or protocol.lost is not None or self.endpoint.route is not None:
            return self._connect_and_call(packed)
        return protocol.send_packed(packed, self.endpoint.socket_timeout)

    async def _connect_and_call(self, packed: bytes) -> Any:
        protocol = self._protocol
        if protocol is None or protocol.lost is not None:
            protocol = await self._connect()
        reply = await protocol.send_packed(packed, self.endpoint.socket_timeout)
        return self._followed(protocol, [reply])[0]

    def _followed(self, protocol: _Protocol, replies: list[Any]) -> list[Any]:
        if self.endpoint.follow(replies) and self._protocol is protocol:
            self._close()  # the slot moved: the next call connects to its new master
        return replies


async def _replies(waiters: list[asyncio.Future[Any]]) -> list[Any]:
    try:
        return [await waiter for waiter in waiters]
    finally:
        # a lost connection fails every waiter: retrieve them all, or asyncio
        # logs "Future exception was never retrieved" for those not awaited
        for waiter in waiters:
            if waiter.done() and not waiter.cancelled():
                waiter.exception()

"""Many `wait_result` calls of one client on one blocking connection.

The protocol's waiter (§9) blocks with BLMOVE on its job's done:<id>: one
pooled connection per waiter, and a pool runs out (redis-py's default is
100). A client instead runs one *hub*, a thread (sync) or a task (asyncio),
that follows the queue's events stream with XREAD BLOCK on a connection of
its own and, on a `completed` or `failed` event of a job someone waits for,
reads the job's done:<id> element (LINDEX: the element stays, as §9 requires
of every waiter) and hands it to that job's waiters. Nothing is popped, so
waiters of other clients are untouched.

Nothing is missed: a waiter registers, then reads done:<id> once itself
(the job may have ended before the hub saw it; over the client's lean wire,
which pipelines every caller on one connection); the hub reads all of them again
(a sweep) when it starts, after an error, and whenever the stream may have
been trimmed past the last entry it read (§11: consumers must tolerate gaps),
which it learns from the first entry still in the stream, read in the same
round trip as every XREAD.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio

from conveyor.client.connection import block_slice
from conveyor.client.events import decode_entries
from conveyor.client.transport import translated
from conveyor.errors import ConnectionLostError, ConveyorError
from conveyor.protocol import ops
from conveyor.protocol.keys import QueueKeys

log = logging.getLogger("conveyor")

HUB_BLOCK = 5.0  # one XREAD's longest wait, seconds; then it is sent again
BATCH = 1000  # events per XREAD
ENDINGS = frozenset({"completed", "failed"})


def _own_pool(pool: Any) -> Any:
    """A pool of one connection made like those of `pool` (same class, same
    options: a cluster route, TLS, credentials)."""
    return type(pool)(
        connection_class=pool.connection_class, max_connections=1, **pool.connection_kwargs
    )


def _stream_id(value: Any) -> tuple[int, int]:
    ms, _, seq = ops.text(value).partition("-")
    return int(ms), int(seq or 0)


class _Follow:
    """Where the hub is in the events stream, and what a reply tells it
    (no I/O: shared by both hubs)."""

    def __init__(self, keys: QueueKeys) -> None:
        self.keys = keys
        self.last = "0-0"

    def start(self, newest: Any) -> None:
        """From XREVRANGE events + - COUNT 1: read on from the newest entry."""
        self.last = ops.text(newest[0][0]) if newest else "0-0"

    def read(self, reply: Any, first: Any, waited: Iterable[str]) -> tuple[set[str], bool]:
        """From an XREAD reply and the stream's first entry: the waited-for
        jobs that ended, and whether entries after our last one may have
        been trimmed unseen (then every waiter is looked up again)."""
        before = self.last
        ended = set()
        wanted = set(waited)
        streams = reply.items() if isinstance(reply, dict) else (reply or [])
        for _, entries in streams:
            for event in decode_entries(entries):
                self.last = event.stream_id
                if event.name in ENDINGS and event.job_id in wanted:
                    ended.add(event.job_id)
        gap = bool(first) and _stream_id(first[0][0]) > _stream_id(before)
        return ended, gap and before != "0-0"


@dataclass(eq=False)
class _SyncWaiter:
    done: threading.Event = field(default_factory=threading.Event)
    element: Any = None
    error: ConveyorError | None = None


class SyncWaits:
    """The hub of a sync client: a daemon thread while anyone waits."""

    def __init__(
        self, client: redis.Redis, keys: QueueKeys, done_element: Callable[[str], Any]
    ) -> None:
        self._done_element = done_element
        self._hub_client = redis.Redis.from_pool(_own_pool(client.connection_pool))
        self._follow = _Follow(keys)
        self._block_ms = round(
            1000 * block_slice(client.connection_pool.connection_kwargs, HUB_BLOCK)
        )
        self._lock = threading.Lock()
        self._waiters: dict[str, list[_SyncWaiter]] = {}
        self._running = False
        self._closed = False

    def wait(self, job_id: str, timeout: float) -> Any:
        """The done:<id> element of a job that ends within `timeout` s, else None."""
        waiter = _SyncWaiter()
        with self._lock:
            self._waiters.setdefault(job_id, []).append(waiter)
            start, self._running = not self._running, True
        if start:
            threading.Thread(target=self._run, name="conveyor-waits", daemon=True).start()
        try:
            # it may have ended before the hub was watching
            self._deliver(job_id, self._done_element(job_id))
            waiter.done.wait(timeout)
        finally:
            with self._lock:
                self._forget(job_id, waiter)
        if waiter.error is not None:
            raise waiter.error
        return waiter.element

    def close(self) -> None:
        """Close the hub's connection; a hub blocked on it ends quietly."""
        self._closed = True
        self._hub_client.close()
        self._hub_client.connection_pool.disconnect()

    def _forget(self, job_id: str, waiter: _SyncWaiter) -> None:
        waiters = self._waiters.get(job_id)
        if waiters is not None and waiter in waiters:
            waiters.remove(waiter)
            if not waiters:
                del self._waiters[job_id]

    def _deliver(self, job_id: str, element: Any) -> None:
        if element is None:
            return
        with self._lock:
            for waiter in self._waiters.pop(job_id, []):
                waiter.element = element
                waiter.done.set()

    def _anyone_waits(self) -> bool:
        """True while anyone waits; else the hub ends (marked under the lock,
        so a waiter that comes next starts a new one)."""
        with self._lock:
            if not self._waiters:
                self._running = False
            return self._running

    def _run(self) -> None:
        try:
            self._follow_events()
        except Exception:
            if not self._closed:  # its connection closed under it: the client closed
                raise

    def _follow_events(self) -> None:
        sweep, delay = True, 0.1
        while not self._closed and self._anyone_waits():
            try:
                with translated():
                    if sweep:
                        self._start_and_sweep()
                    sweep = self._follow_once()
                delay = 0.1
            except ConnectionLostError as exc:  # Redis away: waiters keep their deadlines
                if self._closed:  # the client closed the hub's connection under it
                    return
                log.warning("waiting for results: %s; retrying in %.1f s", exc, delay)
                time.sleep(delay)
                sweep, delay = True, min(delay * 2, 5.0)
            except ConveyorError as exc:
                self._fail_all(exc)
                return

    def _start_and_sweep(self) -> None:
        keys = self._follow.keys
        self._follow.start(self._hub_client.xrevrange(keys.events, "+", "-", count=1))
        # the waiters of now, not of before the stream position was taken: one that
        # came in between may have ended before that position, unseen by the stream
        with self._lock:
            waited = list(self._waiters)
        self._fetch(waited)

    def _follow_once(self) -> bool:
        """One XREAD; True when a sweep must follow (a possible gap)."""
        keys = self._follow.keys
        pipe = self._hub_client.pipeline(transaction=False)
        pipe.xread({keys.events: self._follow.last}, count=BATCH, block=self._block_ms)
        pipe.xrange(keys.events, "-", "+", count=1)
        reply, first = pipe.execute()
        # the waiters of now, not of when the XREAD went out: one that came
        # meanwhile read done:<id> before its job's event, so it needs this one
        with self._lock:
            waited = list(self._waiters)
        ended, gap = self._follow.read(reply, first, waited)
        self._fetch(ended)
        return gap

    def _fetch(self, job_ids: Iterable[str]) -> None:
        ids = list(job_ids)
        if not ids:
            return
        pipe = self._hub_client.pipeline(transaction=False)
        for job_id in ids:
            pipe.lindex(self._follow.keys.done(job_id), -1)
        for job_id, element in zip(ids, pipe.execute(), strict=True):
            self._deliver(job_id, element)

    def _fail_all(self, error: ConveyorError) -> None:
        with self._lock:
            for waiters in self._waiters.values():
                for waiter in waiters:
                    waiter.error = error
                    waiter.done.set()
            self._waiters.clear()
            self._running = False


class AsyncWaits:
    """The hub of an asyncio client: a task on its loop while anyone waits."""

    def __init__(
        self,
        client: redis.asyncio.Redis,
        keys: QueueKeys,
        done_element: Callable[[str], Awaitable[Any]],
    ) -> None:
        self._done_element = done_element
        self._hub_client = redis.asyncio.Redis.from_pool(_own_pool(client.connection_pool))
        self._follow = _Follow(keys)
        self._block_ms = round(
            1000 * block_slice(client.connection_pool.connection_kwargs, HUB_BLOCK)
        )
        self._waiters: dict[str, list[asyncio.Future[Any]]] = {}
        self._hub: asyncio.Task[None] | None = None

    async def wait(self, job_id: str, timeout: float) -> Any:
        """The done:<id> element of a job that ends within `timeout` s, else None."""
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(job_id, []).append(waiter)
        if self._hub is None or self._hub.done():
            self._hub = asyncio.ensure_future(self._run())
        try:
            # it may have ended before the hub was watching
            self._deliver(job_id, await self._done_element(job_id))
            return await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except TimeoutError:
            return None
        finally:
            waiters = self._waiters.get(job_id)
            if waiters is not None and waiter in waiters:
                waiters.remove(waiter)
                if not waiters:
                    del self._waiters[job_id]

    async def close(self) -> None:
        if self._hub is not None and not self._hub.done():
            self._hub.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._hub
        await self._hub_client.aclose()

    def _deliver(self, job_id: str, element: Any) -> None:
        if element is None:
            return
        for waiter in self._waiters.pop(job_id, []):
            if not waiter.done():
                waiter.set_result(element)

    async def _run(self) -> None:
        sweep, delay = True, 0.1
        while self._waiters:
            try:
                with translated():
                    if sweep:
                        await self._start_and_sweep()
                    sweep = await self._follow_once()
                delay = 0.1
            except ConnectionLostError as exc:
                log.warning("waiting for results: %s; retrying in %.1f s", exc, delay)
                await asyncio.sleep(delay)
                sweep, delay = True, min(delay * 2, 5.0)
            except ConveyorError as exc:
                for waiters in self._waiters.values():
                    for waiter in waiters:
                        if not waiter.done():
                            waiter.set_exception(exc)
                self._waiters.clear()
                return

    async def _start_and_sweep(self) -> None:
        keys = self._follow.keys
        self._follow.start(await self._hub_client.xrevrange(keys.events, "+", "-", count=1))
        await self._fetch(list(self._waiters))  # those of now (see SyncWaits)

    async def _follow_once(self) -> bool:
        keys = self._follow.keys
        pipe = self._hub_client.pipeline(transaction=False)
        pipe.xread({keys.events: self._follow.last}, count=BATCH, block=self._block_ms)
        pipe.xrange(keys.events, "-", "+", count=1)
        reply, first = await pipe.execute()
        ended, gap = self._follow.read(reply, first, list(self._waiters))  # those of now
        await self._fetch(ended)
        return gap

    async def _fetch(self, job_ids: Iterable[str]) -> None:
        ids = list(job_ids)
        if not ids:
            return
        pipe = self._hub_client.pipeline(transaction=False)
        for job_id in ids:
            pipe.lindex(self._follow.keys.done(job_id), -1)
        for job_id, element in zip(ids, await pipe.execute(), strict=True):
            self._deliver(job_id, element)

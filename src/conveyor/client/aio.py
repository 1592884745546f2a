"""The asyncio client: the same shell as sync.py, with await. Keep the two in step."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterable
from threading import get_ident
from typing import Any, Unpack

import redis
import redis.asyncio

from conveyor.client import handoffs
from conveyor.client.aio_admin import AsyncQueueAdmin
from conveyor.client.aio_flows import AsyncQueueFlows
from conveyor.client.aio_operators import AsyncQueueOperators
from conveyor.client.aio_views import AsyncQueueViews
from conveyor.client.cluster import Route, SlotRoute
from conveyor.client.connection import (
    needs_route,
    resolve_url,
    slot_route,
    wire_endpoint,
)
from conveyor.client.core import RESEND_DELAYS, QueueCore, applied_replies, carry_doubt
from conveyor.client.models import Enqueued, EnqueueOptions, IfExists, JobRequest, QueueSettings
from conveyor.client.transport import AsyncRunner, async_client, translated
from conveyor.client.waits import AsyncWaits
from conveyor.client.wire import AsyncWire
from conveyor.errors import ConfigurationError, ConnectionLostError, ConveyorError, WaitTimeoutError
from conveyor.protocol import ops
from conveyor.protocol.keys import PROTOCOL_VERSION, queue_registry

log = logging.getLogger("conveyor")


def connect(
    url: str | None = None, *, route: Route | None = None, max_connections: int = 100
) -> redis.asyncio.Redis:
    """A redis-py client for `url` (or the environment), bytes replies; on a
    cluster, connected to the master of `route`'s slot."""
    resolved = resolve_url(url)
    return async_client(resolved, needs_route(resolved, route), max_connections=max_connections)


async def _closed_with_the_loop(
    waits: AsyncWaits, wire: AsyncWire | None, client: redis.asyncio.Redis | None
) -> AsyncIterator[None]:
    """Parked at its yield on the loop the connections were made on; the
    loop closes it as it shuts down (asyncio.run, anyio: shutdown_asyncgens),
    so the connections are closed there, not abandoned to a closed loop."""
    try:
        yield
    finally:
        await waits.close()
        if wire is not None:
            await wire.close()
        if client is not None:
            await client.aclose()


async def _start(closer: AsyncIterator[None]) -> None:
    await anext(closer)


class AsyncQueue(AsyncQueueFlows, AsyncQueueAdmin, AsyncQueueOperators, AsyncQueueViews):
    """Enqueue and inspect the jobs of one queue from asyncio.

    >>> queue = AsyncQueue("emails", url="redis://127.0.0.1:6379/0")
    >>> await queue.enqueue("send", {"to": "a@example.com"}, delay=60)
    """

    def __init__(
        self,
        name: str = "default",
        *,
        url: str | None = None,
        client: redis.asyncio.Redis | None = None,
        settings: QueueSettings | None = None,
        failures: bool = False,
    ) -> None:
        self.core = QueueCore(name, settings or QueueSettings(), failures=failures)
        self._owns_client = client is None
        # resolved once: with no URL configured, finding the embedded server is a probe
        self._url = None if client is not None else resolve_url(url)
        # on a cluster, every connection goes to the master of the queue's slot (a client
        # passed in made by cluster.sync_pool / async_pool carries its route)
        self.route = (
            slot_route(self._url, self.core.keys)
            if self._url is not None
            else client.connection_pool.connection_kwargs.get("route")
            if client is not None
            else None
        )
        self._client = (
            client
            if client is not None
            else connect(
                self._url, route=self.route, max_connections=self.core.settings.max_connections
            )
        )
        self._wire: AsyncWire | None = None
        self._runner = self._connections()
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop it is used on
        self._thread = 0  # the thread that loop runs in
        self._closer: AsyncIterator[None] | None = None
        self._closer_start: asyncio.Task[None] | None = None
        self._checked = False
        self._pool_options = self._client.connection_pool.connection_kwargs
        self._peers: dict[str, AsyncQueue] = {}  # the other queues of this client's flows

    def _connections(self) -> AsyncRunner:
        """The lean wire (when we make the connections ourselves) and the runner."""
        endpoint = None if self._url is None else wire_endpoint(self._url, self.route)
        self._wire = None if endpoint is None else AsyncWire(endpoint)
        self._waits = AsyncWaits(self._client, self.core.keys, self._done_element)
        return AsyncRunner(self._client, self.core.scripts, self._wire, self.core.replica_wait)

    @property
    def client(self) -> redis.asyncio.Redis:
        """The redis-py client, for the running event loop."""
        loop = self._loop
        if loop is None or self._thread != get_ident() or not loop.is_running():
            self._follow_loop()
        return self._client

    def _follow_loop(self) -> None:
        """Connections belong to the event loop they were made on. Used on a
        new loop after the old one stopped (a second asyncio.run, a test
        client's loop per test), the queue reconnects there; while the old
        loop still runs (another thread), it refuses at once."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # off the loop: a thread handing a call to it
            return
        if loop is self._loop:
            return
        if self._loop is not None:
            if self._loop.is_running():
                raise ConfigurationError(
                    f"{self!r} is in use on another event loop, still running (another "
                    "thread): its connections belong to that loop; make one AsyncQueue "
                    "per event loop"
                )
            if self._url is None:
                raise ConfigurationError(
                    f"{self!r} was given a client made for an event loop that has stopped: "
                    "make the client (or the AsyncQueue, with url=...) on the running loop"
                )
            self._client = connect(
                self._url, route=self.route, max_connections=self.core.settings.max_connections
            )
            self._runner = self._connections()
        self._loop, self._thread = loop, get_ident()
        owned = self._client if self._owns_client else None
        self._closer = _closed_with_the_loop(self._waits, self._wire, owned)
        self._closer_start = loop.create_task(_start(self._closer))

    @property
    def name(self) -> str:
        return self.core.name

    @property
    def runner(self) -> AsyncRunner:
        """Runs this queue's scripts (over the lean wire when there is one)."""
        loop = self._loop
        # no asyncio.get_running_loop() here: on Python 3.11 it makes a getpid()
        # system call, and every enqueue passes here
        if loop is None or self._thread != get_ident() or not loop.is_running():
            self._follow_loop()
        return self._runner

    async def __aenter__(self) -> AsyncQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connections this queue opened: its own, its waiters',
        and those of the other queues its flows reached (a flow's nodes in
        other queues are written through a queue of each name, kept open for
        reuse). A `client=` passed in is left open: it is the caller's. Use
        `async with AsyncQueue(...)`, or call this once when done."""
        for peer in self._peers.values():
            await peer.close()
        self._follow_loop()  # the connections of a stopped loop are abandoned, not closed
        await self._waits.close()
        if self._wire is not None:
            await self._wire.close()
        if self._owns_client:
            await self._client.aclose()

    def __repr__(self) -> str:
        lane = ", failures=True" if self.core.failures else ""
        return f"AsyncQueue({self.name!r}{lane})"

    def failure_lane(self) -> AsyncQueue:
        """The queue of this queue's failure-handler jobs (same connection)."""
        return AsyncQueue(self.name, client=self.client, settings=self.core.settings, failures=True)

    def peer(self, name: str) -> AsyncQueue:
        """Queue `name` with this queue's settings, on the same server (on a
        cluster: connected to its own slot's master; a queue made with
        `client=` shares that client, which a cluster cannot do); this queue
        for its own name."""
        if name == self.name:
            return self
        if name not in self._peers:
            if self._owns_client:
                peer = AsyncQueue(name, url=self._url, settings=self.core.settings)
            else:
                peer = AsyncQueue(name, client=self.client, settings=self.core.settings)
            self._peers[name] = peer
        return self._peers[name]

    # --- server checks ---------------------------------------------------------

    async def check(self) -> None:
        """Check the server once: version, eviction policy, protocol version."""
        if self._checked:
            return
        with translated():
            version = (await self.client.info("server"))["redis_version"]
            try:
                policy = (await self.client.config_get("maxmemory-policy")).get("maxmemory-policy")
            except redis.ResponseError:  # CONFIG may be forbidden (ACL, managed Redis)
                policy = None
            for warning in self.core.check_server(str(version), policy):
                log.warning("%s", warning)
            await self.client.hsetnx(self.core.keys.meta, "version", PROTOCOL_VERSION)
            # a cluster has no one slot for the registry
            if not isinstance(self.route, SlotRoute) and not self.core.failures:
                # the registry is outside the queue's keys: an ACL user may not reach it
                with contextlib.suppress(redis.exceptions.NoPermissionError):
                    await self.client.sadd(queue_registry(self.core.settings.prefix), self.name)
            self.core.check_protocol(await self.client.hget(self.core.keys.meta, "version"))
        self._checked = True

    # --- producing -------------------------------------------------------------

    async def enqueue(
        self, task: str, data: Any = None, **options: Unpack[EnqueueOptions]
    ) -> Enqueued:
        """Enqueue one job; returns once Redis acknowledged it."""
        if self.core.hooks.on_enqueue:
            requests = self.core.hooked_requests([JobRequest(task, data, options)])
            return (await self._enqueue_hooked(requests, chunk_size=1))[0]
        job_id, call, packed = self.core.enqueue_one(task, data, options)
        if not self._checked:
            await self.check()
        try:  # the first send, with no layer between: a plain job's call is packed ahead
            if packed is None:
                reply = await self.runner.run(call)
            else:
                reply = await self.runner.run_packed(call, packed)
        except ConnectionLostError as exc:
            reply = (await self._resend_enqueues([call], exc))[0]
        return self.core.enqueued_one(job_id, reply)

    async def enqueue_many(
        self,
        jobs: Iterable[JobRequest | tuple[str, Any]],
        *,
        chunk_size: int = 500,
        if_exists: IfExists = "update",
    ) -> list[Enqueued]:
        """Enqueue many jobs in pipelined chunks; every job is validated first.

        `if_exists="skip"`: a job whose id is already a job of the queue (in
        any state) is left alone, not updated, and reported with outcome
        `exists` and that job's state; the others are created. Its jobs take
        only `id` and the record options (SKIP_OPTIONS): any other option is
        an UnknownOptionError, raised before anything is written."""
        if self.core.hooks.on_enqueue:
            requests = self.core.hooked_requests(jobs)
            return await self._enqueue_hooked(requests, chunk_size=chunk_size, if_exists=if_exists)
        calls, ids = self.core.enqueue_many_calls(jobs, chunk_size, if_exists)
        await self.check()
        return self.core.enqueued_many(ids, await self._send_enqueues(calls), if_exists)

    async def _enqueue_hooked(
        self, requests: list[JobRequest], *, chunk_size: int, if_exists: IfExists = "update"
    ) -> list[Enqueued]:
        """Enqueue jobs that met before_enqueue, then tell after_enqueue."""
        try:
            calls, ids = self.core.enqueue_many_calls(requests, chunk_size, if_exists)
            await self.check()
            done = self.core.enqueued_many(ids, await self._send_enqueues(calls), if_exists)
        except BaseException as exc:
            self.core.after_enqueue(requests, None, exc)
            raise
        self.core.after_enqueue(requests, done, None)
        return done

    async def _send_enqueues(self, calls: list[ops.Call]) -> list[Any]:
        try:
            return await self._send(calls)
        except ConnectionLostError as exc:
            return await self._resend_enqueues(calls, exc)

    async def _resend_enqueues(
        self, calls: list[ops.Call], failure: ConnectionLostError
    ) -> list[Any]:
        """After the first send of enqueue calls failed: if it may have been
        applied (its reply lost), send the same calls again, through enqueue:
        their ids and request ids make a re-send of an applied call change
        nothing."""
        doubt = carry_doubt(None, failure)
        if doubt is None:  # nothing was applied: the caller decides
            raise failure
        first = applied_replies(failure, len(calls))
        calls = [self.core.resend_call(call) for call in calls]
        last = failure
        for delay in RESEND_DELAYS:
            await asyncio.sleep(delay)
            try:
                again = await self._send(calls)
            except ConnectionLostError as exc:
                doubt, last = carry_doubt(doubt, exc) or doubt, exc
            else:  # the first send's replies, when known, say what it did
                return again if first is None else first
        if doubt is last:  # the last send's own doubt says it all
            raise last
        raise doubt from last

    async def _send(self, calls: list[ops.Call]) -> list[Any]:
        if len(calls) == 1:  # one round trip without a pipeline's overhead
            return [await self.runner.run(calls[0])]
        return await self.runner.run_many(calls)

    async def cancel(self, job_id: str) -> bool:
        """Remove a job that has not started: waiting, delayed, a blocked twin,
        or a flow's parent waiting for its children (waiting_children), whose
        pending subtree is then cancelled too, in every queue, before this
        returns (docs/protocol.md §14.9). A cancelled flow child fails its
        parent with JobCancelledError under its `on_fail`. True if a job was
        removed; a running job is not (see abort)."""
        reply = int(await self.runner.run(self.core.cancel_call(job_id)))
        if reply == 2:  # a flow's hand-off or cancellation is in the outbox
            await self._carry()
        return reply >= 1

    async def abort(self, job_id: str) -> str:
        """Stop a job wherever it is. Not started yet (waiting, delayed): it is
        cancelled, as `cancel` does ('cancelled'). Running: its worker is told
        through Redis, stops the handler (cancels the task, terminates the
        child process, or sets `current_job().cancelled` for a thread) and fails
        the run for good with AbortedError, telling its waiters ('aborting').
        Else 'finished' (completed or failed already), 'refused' (a state that
        cannot be aborted) or 'missing' (no such job)."""
        reply = await self._runner.run(self.core.abort_call(job_id))
        if ops.marked(reply):  # a flow's child: its parent's hand-off is in the outbox
            await self._carry()
        return ops.word(reply)

    async def promote(self, job_id: str) -> bool:
        """Run a delayed job now; False if it was not delayed."""
        return int(await self.runner.run(self.core.control_call("promote", job_id))) == 1

    async def set_priority(self, job_id: str, priority: int | str) -> bool:
        """Change the priority of a waiting or delayed job; False if it is not one."""
        call = self.core.control_call("reprioritize", job_id, priority)
        return int(await self.runner.run(call)) == 1

    async def retry(self, job_id: str) -> bool:
        """Run a failed job again (failures reset, attempts kept); False if not failed."""
        return int(await self.runner.run(self.core.control_call("retry", job_id))) == 1

    async def release_suspect(self, job_id: str) -> None:
        """As Queue.release_suspect."""
        call = self.core.suspect_call(job_id, "release")
        self.core.suspect_outcome(job_id, await self.runner.run(call))

    async def fail_suspect(self, job_id: str) -> str:
        """As Queue.fail_suspect."""
        call = self.core.suspect_call(job_id, "fail")
        outcome = self.core.suspect_outcome(job_id, await self.runner.run(call))
        if outcome == "running":
            outcome = self.core.suspect_outcome(job_id, await self.abort(job_id))
        return outcome

    async def remove(self, job_id: str) -> str:
        """Delete a job that is not running: 'removed', 'missing' or 'active'.
        A flow's node that had not settled goes as with cancel."""
        reply = await self.runner.run(self.core.control_call("remove", job_id))
        if ops.marked(reply):
            await self._carry()
        return ops.word(reply)

    async def _carry(self) -> None:
        """Carry what a cancel, abort or remove left in this queue's outbox
        down the flow now, queue after queue (client/handoffs.py). Whatever
        is left (Redis away, the budget spent), the workers of the queues
        carry: the entries stay in the outbox until applied."""
        steps = handoffs.carry(
            self.core.keys.prefix, [self.name], events_maxlen=self.core.settings.events_maxlen,
            until=time.monotonic() + handoffs.CLIENT_BUDGET,
        )  # fmt: skip
        try:
            await handoffs.carry_async(self.peer, steps)
        except ConveyorError as exc:
            log.warning("carrying flow hand-offs from queue %s failed: %s", self.name, exc)

    async def set_retention(
        self, *, completed: int | None = None, failed: int | None = None
    ) -> None:
        """Keep at most this many completed / failed records (None: no count
        limit; each record also expires after its result_ttl). Trimmed in
        bounded batches as runs end and workers beat."""
        keep, unset = self.core.retention_fields(completed, failed)
        with translated():
            if keep:
                await self.client.hset(self.core.keys.meta, mapping=keep)  # type: ignore[arg-type]
            if unset:
                await self.client.hdel(self.core.keys.meta, *unset)

    async def pause(self) -> None:
        with translated():
            await self.client.hset(self.core.keys.meta, "paused", "1")

    async def resume(self) -> None:
        with translated():
            await self.client.hdel(self.core.keys.meta, "paused")
            await self.client.zadd(self.core.keys.marker, {"0": 0})

    async def _done_element(self, job_id: str) -> Any:
        """The element of done:<id>, if any (LINDEX: it stays for every waiter)."""
        key = self.core.keys.done(job_id)
        with translated():
            if self._wire is not None:
                return await self._wire.call("LINDEX", key, -1)
            return await self._client.lindex(key, -1)

    async def wait_result(self, job_id: str, *, timeout: float) -> Any:
        """Block on Redis until the job finishes; its result, or JobFailedError,
        JobNotFoundError, or WaitTimeoutError after `timeout` seconds."""
        reply = ops.decode_await(await self.runner.run(self.core.await_call(job_id)))
        if reply.state == "pending":
            # every wait of this client shares one blocking connection (waits.py)
            self._follow_loop()
            element = await self._waits.wait(job_id, timeout)
            if element is None:
                raise WaitTimeoutError(f"job {job_id!r} did not finish within {timeout} s")
            reply = ops.decode_done(element)
        return self.core.outcome(job_id, reply)

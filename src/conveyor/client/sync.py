"""The synchronous client: a thin shell of I/O over QueueCore."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable
from typing import Any, Unpack

import redis

from conveyor.client import handoffs
from conveyor.client.cluster import Route, SlotRoute
from conveyor.client.connection import (
    needs_route,
    resolve_url,
    slot_route,
    wire_endpoint,
)
from conveyor.client.core import RESEND_DELAYS, QueueCore, applied_replies, carry_doubt
from conveyor.client.models import Enqueued, EnqueueOptions, IfExists, JobRequest, QueueSettings
from conveyor.client.sync_admin import QueueAdmin
from conveyor.client.sync_flows import QueueFlows
from conveyor.client.sync_operators import QueueOperators
from conveyor.client.sync_views import QueueViews
from conveyor.client.transport import SyncRunner, sync_client, translated
from conveyor.client.waits import SyncWaits
from conveyor.client.wire import SyncWire
from conveyor.errors import ConnectionLostError, ConveyorError, WaitTimeoutError
from conveyor.protocol import ops
from conveyor.protocol.keys import PROTOCOL_VERSION, queue_registry

log = logging.getLogger("conveyor")


def connect(
    url: str | None = None, *, route: Route | None = None, max_connections: int = 100
) -> redis.Redis:
    """A redis-py client for `url` (or the environment), bytes replies; on a
    cluster, connected to the master of `route`'s slot."""
    resolved = resolve_url(url)
    return sync_client(resolved, needs_route(resolved, route), max_connections=max_connections)


class Queue(QueueFlows, QueueAdmin, QueueOperators, QueueViews):
    """Enqueue and inspect the jobs of one queue, synchronously.

    >>> queue = Queue("emails", url="redis://127.0.0.1:6379/0")
    >>> queue.enqueue("send", {"to": "a@example.com"}, delay=60)
    """

    def __init__(
        self,
        name: str = "default",
        *,
        url: str | None = None,
        client: redis.Redis | None = None,
        settings: QueueSettings | None = None,
        failures: bool = False,
    ) -> None:
        self.core = QueueCore(name, settings or QueueSettings(), failures=failures)
        self._owns_client = client is None
        # resolved once: with no URL configured, finding the embedded server is a probe
        resolved = None if client is not None else resolve_url(url)
        # on a cluster, every connection goes to the master of the queue's slot (a client
        # passed in made by cluster.sync_pool / async_pool carries its route)
        self.route = (
            slot_route(resolved, self.core.keys)
            if resolved is not None
            else client.connection_pool.connection_kwargs.get("route")
            if client is not None
            else None
        )
        self._client = (
            client
            if client is not None
            else connect(
                resolved, route=self.route, max_connections=self.core.settings.max_connections
            )
        )
        # scripts go over the lean wire when we made the connection ourselves
        endpoint = None if resolved is None else wire_endpoint(resolved, self.route)
        self._wire = None if endpoint is None else SyncWire(endpoint)
        self._runner = SyncRunner(
            self._client, self.core.scripts, self._wire, self.core.replica_wait
        )
        self._waits = SyncWaits(self._client, self.core.keys, self._done_element)
        self._checked = False
        self._pool_options = self._client.connection_pool.connection_kwargs
        self._url = resolved  # for the other queues of this client's flows (peer)
        self._peers: dict[str, Queue] = {}

    @property
    def client(self) -> redis.Redis:
        """The redis-py client."""
        return self._client

    @property
    def name(self) -> str:
        return self.core.name

    @property
    def runner(self) -> SyncRunner:
        """Runs this queue's scripts (over the lean wire when there is one)."""
        return self._runner

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections this queue opened: its own, its waiters',
        and those of the other queues its flows reached (a flow's nodes in
        other queues are written through a queue of each name, kept open for
        reuse). A `client=` passed in is left open: it is the caller's. Use
        `with Queue(...)`, or call this once when done."""
        for peer in self._peers.values():
            peer.close()
        self._waits.close()
        if self._wire is not None:
            self._wire.close()
        if self._owns_client:
            self.client.close()

    def __repr__(self) -> str:
        lane = ", failures=True" if self.core.failures else ""
        return f"Queue({self.name!r}{lane})"

    def failure_lane(self) -> Queue:
        """The queue of this queue's failure-handler jobs (same connection)."""
        return Queue(self.name, client=self.client, settings=self.core.settings, failures=True)

    def peer(self, name: str) -> Queue:
        """Queue `name` with this queue's settings, on the same server (on a
        cluster: connected to its own slot's master; a queue made with
        `client=` shares that client, which a cluster cannot do); this queue
        for its own name."""
        if name == self.name:
            return self
        if name not in self._peers:
            if self._owns_client:
                peer = Queue(name, url=self._url, settings=self.core.settings)
            else:
                peer = Queue(name, client=self.client, settings=self.core.settings)
            self._peers[name] = peer
        return self._peers[name]

    # --- server checks ---------------------------------------------------------

    def check(self) -> None:
        """Check the server once: version, eviction policy, protocol version."""
        if self._checked:
            return
        with translated():
            version = self.client.info("server")["redis_version"]
            try:
                policy = (self.client.config_get("maxmemory-policy")).get("maxmemory-policy")
            except redis.ResponseError:  # CONFIG may be forbidden (ACL, managed Redis)
                policy = None
            for warning in self.core.check_server(str(version), policy):
                log.warning("%s", warning)
            self.client.hsetnx(self.core.keys.meta, "version", PROTOCOL_VERSION)
            # a cluster has no one slot for the registry
            if not isinstance(self.route, SlotRoute) and not self.core.failures:
                # the registry is outside the queue's keys: an ACL user may not reach it
                with contextlib.suppress(redis.exceptions.NoPermissionError):
                    self.client.sadd(queue_registry(self.core.settings.prefix), self.name)
            self.core.check_protocol(self.client.hget(self.core.keys.meta, "version"))
        self._checked = True

    # --- producing -------------------------------------------------------------

    def enqueue(self, task: str, data: Any = None, **options: Unpack[EnqueueOptions]) -> Enqueued:
        """Enqueue one job; returns once Redis acknowledged it."""
        if self.core.hooks.on_enqueue:
            requests = self.core.hooked_requests([JobRequest(task, data, options)])
            return (self._enqueue_hooked(requests, chunk_size=1))[0]
        job_id, call, packed = self.core.enqueue_one(task, data, options)
        if not self._checked:
            self.check()
        try:  # the first send, with no layer between: a plain job's call is packed ahead
            if packed is None:
                reply = self._runner.run(call)
            else:
                reply = self._runner.run_packed(call, packed)
        except ConnectionLostError as exc:
            reply = self._resend_enqueues([call], exc)[0]
        return self.core.enqueued_one(job_id, reply)

    def enqueue_many(
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
            return self._enqueue_hooked(requests, chunk_size=chunk_size, if_exists=if_exists)
        calls, ids = self.core.enqueue_many_calls(jobs, chunk_size, if_exists)
        self.check()
        return self.core.enqueued_many(ids, self._send_enqueues(calls), if_exists)

    def _enqueue_hooked(
        self, requests: list[JobRequest], *, chunk_size: int, if_exists: IfExists = "update"
    ) -> list[Enqueued]:
        """Enqueue jobs that met before_enqueue, then tell after_enqueue."""
        try:
            calls, ids = self.core.enqueue_many_calls(requests, chunk_size, if_exists)
            self.check()
            done = self.core.enqueued_many(ids, self._send_enqueues(calls), if_exists)
        except BaseException as exc:
            self.core.after_enqueue(requests, None, exc)
            raise
        self.core.after_enqueue(requests, done, None)
        return done

    def _send_enqueues(self, calls: list[ops.Call]) -> list[Any]:
        try:
            return self._send(calls)
        except ConnectionLostError as exc:
            return self._resend_enqueues(calls, exc)

    def _resend_enqueues(self, calls: list[ops.Call], failure: ConnectionLostError) -> list[Any]:
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
            time.sleep(delay)
            try:
                again = self._send(calls)
            except ConnectionLostError as exc:
                doubt, last = carry_doubt(doubt, exc) or doubt, exc
            else:  # the first send's replies, when known, say what it did
                return again if first is None else first
        if doubt is last:  # the last send's own doubt says it all
            raise last
        raise doubt from last

    def _send(self, calls: list[ops.Call]) -> list[Any]:
        if len(calls) == 1:  # one round trip without a pipeline's overhead
            return [self._runner.run(calls[0])]
        return self._runner.run_many(calls)

    def cancel(self, job_id: str) -> bool:
        """Remove a job that has not started: waiting, delayed, a blocked twin,
        or a flow's parent waiting for its children (waiting_children), whose
        pending subtree is then cancelled too, in every queue, before this
        returns (docs/protocol.md §14.9). A cancelled flow child fails its
        parent with JobCancelledError under its `on_fail`. True if a job was
        removed; a running job is not (see abort)."""
        reply = int(self._runner.run(self.core.cancel_call(job_id)))
        if reply == 2:  # a flow's hand-off or cancellation is in the outbox
            self._carry()
        return reply >= 1

    def abort(self, job_id: str) -> str:
        """Stop a job wherever it is. Not started yet (waiting, delayed): it is
        cancelled, as `cancel` does ('cancelled'). Running: its worker is told
        through Redis, stops the handler (cancels the task, terminates the
        child process, or sets `current_job().cancelled` for a thread) and fails
        the run for good with AbortedError, telling its waiters ('aborting').
        Else 'finished' (completed or failed already), 'refused' (a state that
        cannot be aborted) or 'missing' (no such job)."""
        reply = self._runner.run(self.core.abort_call(job_id))
        if ops.marked(reply):  # a flow's child: its parent's hand-off is in the outbox
            self._carry()
        return ops.word(reply)

    def promote(self, job_id: str) -> bool:
        """Run a delayed job now; False if it was not delayed."""
        return int(self._runner.run(self.core.control_call("promote", job_id))) == 1

    def set_priority(self, job_id: str, priority: int | str) -> bool:
        """Change the priority of a waiting or delayed job; False if it is not one."""
        call = self.core.control_call("reprioritize", job_id, priority)
        return int(self._runner.run(call)) == 1

    def retry(self, job_id: str) -> bool:
        """Run a failed job again (failures reset, attempts kept); False if not failed."""
        return int(self._runner.run(self.core.control_call("retry", job_id))) == 1

    def remove(self, job_id: str) -> str:
        """Delete a job that is not running: 'removed', 'missing' or 'active'.
        A flow's node that had not settled goes as with cancel."""
        reply = self._runner.run(self.core.control_call("remove", job_id))
        if ops.marked(reply):
            self._carry()
        return ops.word(reply)

    def _carry(self) -> None:
        """Carry what a cancel, abort or remove left in this queue's outbox
        down the flow now, queue after queue (client/handoffs.py). Whatever
        is left (Redis away, the budget spent), the workers of the queues
        carry: the entries stay in the outbox until applied."""
        steps = handoffs.carry(
            self.core.keys.prefix, [self.name], events_maxlen=self.core.settings.events_maxlen,
            until=time.monotonic() + handoffs.CLIENT_BUDGET,
        )  # fmt: skip
        try:
            handoffs.carry_sync(self.peer, steps)
        except ConveyorError as exc:
            log.warning("carrying flow hand-offs from queue %s failed: %s", self.name, exc)

    def release_suspect(self, job_id: str) -> None:
        """Let a suspect (a job whose last worker died with it, run isolated in
        a child process of its own, one per worker) run as any other job from
        its next claim on, until it stalls again. Raises JobNotFoundError, or
        NotASuspectError when it is not one."""
        call = self.core.suspect_call(job_id, "release")
        self.core.suspect_outcome(job_id, self._runner.run(call))

    def fail_suspect(self, job_id: str) -> str:
        """End a suspect failed for good: 'failed' (it was waiting: failed
        unrun, with SuspectFailedError) or 'aborting' (it runs: aborted, as
        `abort` does). Raises JobNotFoundError, or NotASuspectError."""
        outcome = self.core.suspect_outcome(
            job_id, self._runner.run(self.core.suspect_call(job_id, "fail"))
        )
        if outcome == "running":
            outcome = self.core.suspect_outcome(job_id, self.abort(job_id))
        return outcome

    def set_retention(self, *, completed: int | None = None, failed: int | None = None) -> None:
        """Keep at most this many completed / failed records (None: no count
        limit; each record also expires after its result_ttl). Trimmed in
        bounded batches as runs end and workers beat."""
        keep, unset = self.core.retention_fields(completed, failed)
        with translated():
            if keep:
                self.client.hset(self.core.keys.meta, mapping=keep)  # type: ignore[arg-type]
            if unset:
                self.client.hdel(self.core.keys.meta, *unset)

    def pause(self) -> None:
        with translated():
            self.client.hset(self.core.keys.meta, "paused", "1")

    def resume(self) -> None:
        with translated():
            self.client.hdel(self.core.keys.meta, "paused")
            self.client.zadd(self.core.keys.marker, {"0": 0})

    def _done_element(self, job_id: str) -> Any:
        """The element of done:<id>, if any (LINDEX: it stays for every waiter)."""
        key = self.core.keys.done(job_id)
        with translated():
            if self._wire is not None:
                return self._wire.call("LINDEX", key, -1)
            return self._client.lindex(key, -1)

    def wait_result(self, job_id: str, *, timeout: float) -> Any:
        """Block on Redis until the job finishes; its result, or JobFailedError,
        JobNotFoundError, or WaitTimeoutError after `timeout` seconds."""
        reply = ops.decode_await(self._runner.run(self.core.await_call(job_id)))
        if reply.state == "pending":
            # every wait of this client shares one blocking connection (waits.py)
            element = self._waits.wait(job_id, timeout)
            if element is None:
                raise WaitTimeoutError(f"job {job_id!r} did not finish within {timeout} s")
            reply = ops.decode_done(element)
        return self.core.outcome(job_id, reply)

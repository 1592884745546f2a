"""Sending encoded chunks to the enqueue scripts: pipelined, one round trip always in flight.

Each chunk is one `EVALSHA enqueue` call whose arguments are `ops.enqueue`'s for the same
jobs, or one `EVALSHA enqueue_skip` call (`ops.enqueue_skip`'s): the head (script, keys,
events cap, arity) is packed once per script, each chunk's jobs are already RESP
(`encode.Chunk`), so a call is three byte strings joined by the kernel.

Calls go out `depth` at a time over one connection, and the next group is sent before the
replies of the previous one are read: Redis runs one group while this process encodes the
next. Replies are read in order; an error reply fails the task (Spark retries it, and the
retry's enqueues of jobs that did get in change nothing: `skipped` by enqueue_skip, `exists`
as re-sends to enqueue).
A script missing on the server (`NOSCRIPT`: flushed or restarted mid-write) is loaded again
and every call not yet acknowledged is sent again, for the same reason safely.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from redis import exceptions as rx

from conveyor.client.core import QueueCore
from conveyor.client.transport import translated
from conveyor.protocol import ops
from conveyor.protocol.ops import ENQUEUE_ARITY, SKIP_ARITY, text

from . import store
from .encode import Chunk, resp

if TYPE_CHECKING:
    import pyarrow as pa
    import redis

__all__ = ["FINAL_STATES", "EnqueueSender"]

# States after which a job will not run again on its own ('' or none: no record left).
FINAL_STATES = frozenset({"completed", "failed", ""})


class _Head:
    """One script's call up to its jobs, packed once, and its ARGV entries per job."""

    def __init__(self, core: QueueCore, call: ops.Call, arity: int) -> None:
        self.script = core.scripts[call.script]
        head = ["EVALSHA", self.script.sha, len(call.keys), *call.keys, *call.args]
        self.count = len(head)
        self.packed = b"".join(resp(arg) for arg in head)
        self.arity = arity


class EnqueueSender:
    """Enqueues chunks of one queue over a connection of `client`; counts the outcomes.
    `skip_existing` looks up the ids of `enqueue` chunks first (enqueue_skip chunks need
    no look-up: the script skips what exists)."""

    def __init__(
        self,
        client: redis.Redis,
        core: QueueCore,
        *,
        depth: int,
        skip_existing: bool,
        track_pending: bool = False,
    ) -> None:
        self.client = client
        self.core = core
        self.depth = depth
        self.skip_existing = skip_existing
        maxlen = core.settings.events_maxlen
        self.heads = {
            "enqueue": _Head(core, ops.enqueue(core.keys, [], events_maxlen=maxlen),
                             ENQUEUE_ARITY),
            "enqueue_skip": _Head(core, ops.enqueue_skip(core.keys, [], events_maxlen=maxlen),
                                  SKIP_ARITY),
        }  # fmt: skip
        self.outcomes: dict[str, int] = {}
        # with `track_pending`: the ids whose job will still end (created, or standing in a
        # state that is not final), from the scripts' replies (`pending_ids`)
        self.pending: list[pa.Array] | None = [] if track_pending else None
        self._waiting: list[Chunk] = []
        self._in_flight: deque[list[Chunk]] = deque()
        self._connection: Any = None

    def add(self, chunk: Chunk) -> None:
        """Queue a chunk; sends a group of `depth` chunks as soon as there is one."""
        if chunk.count:
            self._waiting.append(chunk)
        if len(self._waiting) >= self.depth:
            self._send_group()

    def flush(self) -> dict[str, int]:
        """Send what is left and wait for every reply; returns outcome -> count."""
        if self._waiting:
            self._send_group()
        with translated():
            while self._in_flight:
                self._receive(self._in_flight.popleft())
        return self.outcomes

    def close(self) -> None:
        if self._connection is not None:
            self._connection.disconnect()  # replies may be unread after an error
            self.client.connection_pool.release(self._connection)
            self._connection = None

    def _send_group(self) -> None:
        group, self._waiting = self._waiting, []
        with translated():
            if self.skip_existing:
                group = self._without_existing(group)
            if group:
                self._send(group)
                self._in_flight.append(group)
            while len(self._in_flight) > 1:  # keep one group in flight while encoding
                self._receive(self._in_flight.popleft())

    def _without_existing(self, group: Sequence[Chunk]) -> list[Chunk]:
        looked_up = [chunk for chunk in group if chunk.script == "enqueue"]
        ids = [job_id for chunk in looked_up for job_id in chunk.ids.to_pylist()]
        groups = {name for chunk in looked_up for name in chunk.groups}
        existing = store.existing_ids(self.client, self.core.keys, ids, groups)
        if not existing:
            return list(group)
        self._count("skipped", len(existing))
        if self.pending is not None:
            self._track_unfinished(sorted(existing))
        kept = [chunk.without(existing) if chunk.script == "enqueue" else chunk for chunk in group]
        return [chunk for chunk in kept if chunk.count]

    def _send(self, group: Sequence[Chunk]) -> None:
        if self._connection is None:
            self._connection = self.client.connection_pool.get_connection()
            for head in self.heads.values():
                if self.client.script_load(head.script.source) != head.script.sha:
                    raise RuntimeError(f"the server's SHA1 of {head.script.name} differs")
        parts = [part for chunk in group for part in self.command(chunk)]
        self._connection.send_packed_command(parts, check_health=False)

    def command(self, chunk: Chunk) -> list[Any]:
        """The RESP of the chunk's script call, in parts (the kernel joins them)."""
        head = self.heads[chunk.script]
        return [b"*%d\r\n" % (head.count + chunk.count * head.arity), head.packed, chunk.body()]

    def _receive(self, group: list[Chunk]) -> None:
        for i, chunk in enumerate(group):
            try:
                reply = self._connection.read_response()
            except rx.NoScriptError:
                self._send_again(group[i:])
                return
            if chunk.script == "enqueue_skip":  # the number created; the others existed
                created = ops.skip_created(reply)
                self._count("created", created)
                self._count("skipped", chunk.count - created)
                if self.pending is not None:
                    self._track(chunk, [
                        int(reply[k]) - 1 for k in range(1, len(reply), 2)
                        if text(reply[k + 1]) in FINAL_STATES
                    ])  # fmt: skip
                continue
            states = reply[1 : 2 * chunk.count : 2]  # per job: outcome, state (then extras)
            for outcome in reply[0 : 2 * chunk.count : 2]:
                self._count(text(outcome), 1)
            if self.pending is not None:
                self._track(chunk, [k for k, s in enumerate(states) if text(s) in FINAL_STATES])

    def _track(self, chunk: Chunk, over: list[int]) -> None:
        """Record the chunk's ids but those at positions `over` (jobs that will not end
        again: finished, or gone) as pending."""
        assert self.pending is not None
        if not over:
            self.pending.append(chunk.ids)
            return
        import pyarrow as pa
        import pyarrow.compute as pc

        keep = pc.invert(pc.is_in(pa.array(range(chunk.count)), pa.array(over, pa.int64())))
        self.pending.append(chunk.ids.filter(keep))

    def _track_unfinished(self, ids: list[str]) -> None:
        """Ids that exist and were not sent: pending unless their record is finished."""
        import pyarrow as pa

        assert self.pending is not None
        pipe = self.client.pipeline(transaction=False)
        for job_id in ids:
            pipe.hget(self.core.keys.job(job_id), "state")
        states = pipe.execute()
        left = [i for i, s in zip(ids, states, strict=True) if text(s or b"") not in FINAL_STATES]
        self.pending.append(pa.array(left, pa.string()))

    def pending_ids(self, per_blob: int = 50_000) -> list[bytes]:
        """The pending ids seen so far (`track_pending`), newline-separated, at most
        `per_blob` in each (a blob stays far below Redis' 512 MB bulk limit)."""
        ids = [i for ids in self.pending or () for i in ids.to_pylist()]
        return ["\n".join(ids[k : k + per_blob]).encode() for k in range(0, len(ids), per_blob)]

    def _count(self, outcome: str, n: int) -> None:
        if n:
            self.outcomes[outcome] = self.outcomes.get(outcome, 0) + n

    def _send_again(self, unacknowledged: list[Chunk]) -> None:
        """After NOSCRIPT: a new connection, the script loaded, every call not yet
        acknowledged sent again (re-sends of calls that did run change nothing)."""
        groups = [unacknowledged, *self._in_flight]
        self._in_flight.clear()
        self.close()
        for group in groups:
            self._send(group)
            self._receive(group)

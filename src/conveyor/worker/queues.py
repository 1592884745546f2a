"""Several queues per worker: what the worker keeps per queue (a lane), and
the order its one claim loop takes them in.

Leases, the roll call and reaping are per queue, so each queue has its own
job pool, heartbeat thread and courier; the concurrency budget, the claim
loop and the idle wait are the worker's, shared by its queues."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from conveyor.client.aio import AsyncQueue
from conveyor.client.cluster import SlotRoute
from conveyor.client.connection import slot_route
from conveyor.client.tasks import Tasks
from conveyor.client.wire import SyncWire
from conveyor.errors import ConfigurationError, ConveyorError
from conveyor.hooks import Hooks
from conveyor.protocol import ops
from conveyor.protocol.keys import QueueKeys
from conveyor.worker.courier import Courier
from conveyor.worker.heartbeat import Heartbeat
from conveyor.worker.metrics import MetricsRecorder
from conveyor.worker.pool import JobPool
from conveyor.worker.roll_call import RollCall
from conveyor.worker.waiting import Blocker

log = logging.getLogger("conveyor.worker")


@dataclass(kw_only=True, slots=True)
class Lane:
    """One queue of a worker and the parts that serve it."""

    tasks: Tasks
    queue: AsyncQueue
    jobs: JobPool
    hooks: Hooks
    heartbeat: Heartbeat
    courier: Courier | None
    recorder: MetricsRecorder | None
    sync_client: redis.Redis
    beat_wire: SyncWire | None
    roll_call: RollCall

    def start(self) -> None:
        self.heartbeat.start()
        if self.courier is not None:
            self.courier.start()

    async def close(self, worker_id: str) -> None:
        """Stop its threads and runners, leave the roll call, close connections."""
        self.heartbeat.stop()
        if self.courier is not None:
            await asyncio.to_thread(self.courier.stop)
        await self.jobs.close()
        queue = self.queue
        with contextlib.suppress(ConveyorError, redis.RedisError, OSError):
            if self.recorder is not None:  # the counts since the last beat
                await asyncio.to_thread(self.recorder.flush, self.heartbeat.runner)
            await asyncio.to_thread(self.heartbeat.leave)
            await queue.client.delete(queue.core.keys.wake(worker_id))
        await queue.close()
        self.sync_client.close()
        if self.beat_wire is not None:
            self.beat_wire.close()


def parse_queue_spec(spec: str) -> tuple[list[str], tuple[int, ...]]:
    """`high,default,low` (strict order) or `high:5,default:3,low:1` (weights): the queue
    names and their weights (none for strict order). ConfigurationError if malformed."""
    names: list[str] = []
    weights: list[int] = []
    for item in spec.split(","):
        name, colon, weight = item.strip().partition(":")
        if not name:
            raise ConfigurationError(f"an empty queue name in {spec!r}")
        if colon:
            if not weight.isdigit() or int(weight) < 1:
                raise ConfigurationError(
                    f"queue {name!r}: the weight must be a whole number >= 1, not {weight!r}"
                )
            weights.append(int(weight))
        names.append(name)
    if weights and len(weights) != len(names):
        raise ConfigurationError(
            f"give every queue a weight (high:5,default:3,low:1) or none (strict order): {spec!r}"
        )
    if len(set(names)) != len(names):
        raise ConfigurationError(f"a queue is named twice in {spec!r}")
    return names, tuple(weights)


def check_queues(tasks: Sequence[Tasks], weights: Sequence[int], url: str) -> None:
    """Refuse, before anything connects, what one worker cannot serve."""
    if not tasks:
        raise ConfigurationError("a worker needs the Tasks of at least one queue")
    names = [t.queue_name for t in tasks]
    if len(set(names)) != len(names):
        raise ConfigurationError(f"a queue is named twice: {names}")
    if weights and len(weights) != len(tasks):
        raise ConfigurationError(
            f"{len(weights)} weight(s) for {len(tasks)} queue(s): give one per queue, or none"
        )
    urls = {t.url for t in tasks if t.url is not None}
    if len(urls) > 1:
        raise ConfigurationError(
            f"the Tasks of one worker name different Redis URLs ({sorted(urls)}): one worker "
            "serves queues of one Redis"
        )
    if len(tasks) > 1:
        keys = [QueueKeys(t.settings.prefix, t.queue_name) for t in tasks]
        slots = {r.slot for k in keys if isinstance(r := slot_route(url, k), SlotRoute)}
        if len(slots) > 1:
            raise ConfigurationError(
                f"queues {names} are in different slots of the Redis Cluster: one worker's "
                "idle wait is one BZPOPMIN, whose keys must share a slot. Run one worker per "
                "queue on a Cluster"
            )


class ClaimOrder:
    """The order a claim tries the queues in.

    Strict (no weights): by position; a queue is claimed from only when every
    queue before it had nothing to claim. Weighted: stride scheduling over the
    jobs claimed. Each queue's pass grows by jobs / weight, the lowest pass
    goes first, so while every queue has jobs the claims are shared in
    proportion to the weights. A queue found empty banks no credit: its pass
    is raised to that of the queue served, or after an idle hour it would
    take every claim until it caught up."""

    def __init__(self, count: int, weights: Sequence[int] = ()) -> None:
        self._weights = tuple(weights)
        self._passes = [0.0] * count
        self._positions = list(range(count))

    def turn(self) -> list[int]:
        """The lanes' indexes, in the order this claim tries them."""
        if not self._weights:
            return self._positions
        passes = self._passes
        return sorted(self._positions, key=lambda i: passes[i])  # stable: ties by position

    def claimed(self, index: int, jobs: int, empty: Sequence[int]) -> None:
        """Lane `index` gave `jobs`; the lanes in `empty` (tried first) had none."""
        if not self._weights:
            return
        passes = self._passes
        for i in empty:
            passes[i] = max(passes[i], passes[index])
        passes[index] += jobs / self._weights[index]


def merge_replies(replies: Sequence[ops.ClaimReply]) -> ops.ClaimReply:
    """The empty claims of every queue as one: the soonest due job of any."""
    dues = [r.next_due_ms for r in replies if r.next_due_ms is not None]
    return ops.ClaimReply(
        now_ms=max(r.now_ms for r in replies),
        next_due_ms=min(dues) if dues else None,
        jobs=[],
        held=any(r.held for r in replies),
    )


class Turns:
    """The claim loop's side of several queues: the claims of a turn, the
    one wait across every queue, and a wake handed on."""

    def __init__(self, lanes: Sequence[Lane], weights: Sequence[int], worker_id: str) -> None:
        self._lanes = lanes
        self._order = ClaimOrder(len(lanes), weights)
        keys = [lane.queue.core.keys for lane in lanes]
        self._markers = [k.marker for k in keys]
        self._wakes = [k.wake(worker_id) for k in keys]
        self._woken_by: int | None = None  # the lane whose marker ended the last wait

    async def claim(
        self,
        count: int,
        claim: Callable[[int, Lane], Awaitable[ops.ClaimReply]],
    ) -> ops.ClaimReply:
        """Claim from the first queue, in this turn's order, that has jobs
        (one claim call per queue tried: an empty queue ahead in the order
        costs one call per batch)."""
        turn = self._order.turn()
        woken, self._woken_by = self._woken_by, None
        empty: list[ops.ClaimReply] = []
        for tried, index in enumerate(turn):
            reply = await claim(count, self._lanes[index])
            if reply.jobs:
                self._order.claimed(index, len(reply.jobs), turn[:tried])
            else:
                empty.append(reply)
                continue
            if woken is not None and woken not in turn[: tried + 1]:
                await self._hand_on_wake(self._lanes[woken])
            return reply
        return merge_replies(empty)

    async def _hand_on_wake(self, lane: Lane) -> None:
        """Our wait took this queue's marker, but the claims went to a queue
        before it: set the marker again, so another idle worker of the queue
        wakes for the work that set it (claim.lua would have, had we claimed
        there), rather than it waiting for a slot of ours."""
        try:
            await lane.queue.client.zadd(lane.queue.core.keys.marker, {"0": 0})
        except redis.RedisError:  # the next claim of any worker of the queue finds the job
            log.debug("could not hand on the wake marker of %s", lane.queue.name)

    async def block(
        self, blocker: Blocker, timeout: float, woken: Callable[[Lane, Any], None]
    ) -> Any:
        """One BZPOPMIN over every queue's marker and our wake key in each
        (all in one slot on a Cluster: check_queues), with no claim behind
        it: the turn's order, not the queue that woke us, decides where the
        next claim goes. `woken` reads what was written to a wake key."""
        popped = await blocker.bzpopmin(*self._markers, *self._wakes, timeout)
        if popped and not isinstance(popped, Exception):  # [key, member, score]
            key = ops.text(popped[0])
            markers, wakes = self._markers, self._wakes
            self._woken_by = markers.index(key) if key in markers else None
            if key in wakes:  # a stop, or a client's abort of a job of that queue
                woken(self._lanes[wakes.index(key)], popped)
        return popped

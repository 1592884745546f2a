"""Several queues per worker: what the worker keeps per queue (a lane), and
the order its one claim loop takes them in.

Leases, the roll call and reaping are per queue, so each queue has its own
job pool, heartbeat thread and courier; the concurrency budget, the claim
loop and the idle wait are the worker's, shared by its queues."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import redis

from conveyor.client.aio import AsyncQueue
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
        slots = {r.slot for k in keys if (r := slot_route(url, k)) is not None}
        if len(slots) > 1:
            raise ConfigurationError(
                f"queues {names} are in different slots of the Redis Cluster: one worker's "
                "idle wait is one BZPOPMIN, whose keys must share a slot. Run one worker per "
                "queue, or name the queues so their hash tags share a slot"
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

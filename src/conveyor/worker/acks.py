"""Batched acknowledgements: finished jobs are written in one pipelined round
trip per batch. While one batch is in flight the next one fills, so a busy
worker batches by itself and an idle one acknowledges at once.

A worker waiting for slots may have a claim ride behind a batch, in the same
pipeline (`Ride`): Redis runs the outcomes first, so the jobs they free are
free before the claim takes new ones, and a slot costs one round trip, not an
acknowledgement's and then a claim's (docs/protocol.md §8).

With a rider over the lean wire (one connection, whose commands Redis runs in
the order they were written), up to `TURNS` batches are in flight at once: the
network wait of one overlaps the running of the jobs of another. A ride then
counts as free the jobs of every batch written ahead of it on that connection
(`ahead`), not only its own."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from conveyor.client.core import QueueCore
from conveyor.client.transport import AsyncRunner, raised, translated
from conveyor.errors import ConnectionLostError, UnreplicatedWriteError
from conveyor.protocol import ops
from conveyor.worker.execution import Deferred, Ended, Failure, Limited, Success

log = logging.getLogger("conveyor.worker")

Outcome = tuple[str, str, Ended]  # id, token, outcome

# Batches in flight at once when claims ride behind them over one ordered
# connection and the round trip is long (claiming.SPLIT_AT): the jobs of one
# turn of the slots run while the others' round trips are out. Three beat two
# and four with 1 ms each way (the benchmark's *_net scenarios). Otherwise one.
TURNS = 3


@dataclass(frozen=True, slots=True)
class Ride:
    """A claim sent behind a batch of outcomes; `landed` gets its reply (or
    the error that kept it from one) after the outcomes are recorded."""

    call: ops.Call
    landed: Callable[[Any], None]


class Rider(Protocol):
    """What the ack writer asks of the claim loop (claiming.Rider): a claim to
    send behind a batch of `acked` outcomes, or None; how many batches may be
    in flight at once; and a turn's share of the slots."""

    @property
    def turns(self) -> int: ...

    @property
    def share(self) -> int: ...

    def __call__(self, acked: int) -> Ride | None: ...


class AckBuffer:
    def __init__(
        self,
        runner: AsyncRunner,
        core: QueueCore,
        on_written: Callable[[str, str], None],
        on_handed_off: Callable[[], None] | None = None,
    ) -> None:
        self.runner = runner
        self.core = core
        self.on_written = on_written  # (job id, what happened)
        # a flow child's hand-off (completed or failed) waits in the outbox: carry it now
        self.on_handed_off = on_handed_off
        self._pending: list[Outcome] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.rider: Rider | None = None
        self._ran: set[str] = set()  # scripts whose outcomes were written (a ride needs them)
        # outcomes in batches in flight that Redis runs before anything written after them
        self.ahead = 0
        self._writing = 0  # batches in flight
        self._sends: set[asyncio.Task[None]] = set()
        self._delay = 0.05  # the back-off after a lost connection

    @property
    def depth(self) -> int:
        """Batches in flight at once: the rider's turns over the wire (one
        connection: a batch written first runs first), else 1 (redis-py's
        pipelines may take different connections of its pool)."""
        if self.rider is None or self.runner.wire is None:
            return 1
        return self.rider.turns

    def add(self, job_id: str, token: str, outcome: Ended) -> None:
        self._pending.append((job_id, token, outcome))
        self._idle.clear()
        self._wake.set()

    async def drained(self) -> None:
        """Wait until everything added so far is written."""
        await self._idle.wait()

    async def run(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                if self._writing >= self.depth:
                    continue  # the end of a batch in flight wakes us
                batch = self._next_batch()
                if not batch:
                    if not self._writing:
                        self._idle.set()
                    continue
                self._writing += 1
                if self.depth == 1:  # one at a time: no task to pay for
                    await self._send(batch)
                    continue
                send = asyncio.create_task(self._send(batch))
                self._sends.add(send)
                send.add_done_callback(self._sends.discard)
                if self._pending:  # more came meanwhile: a second batch may go too
                    self._wake.set()
        finally:  # cancelled (the pool closes): so are the batches in flight
            for send in list(self._sends):
                send.cancel()

    def _next_batch(self) -> list[Outcome]:
        """Everything pending; with several batches in flight, a turn's share at
        most: outcomes of two turns that ended together go as two writes, each
        with a claim for its turn behind it, so the turns stay apart. (One write
        of both would bring back one turn's claim, and the slots of the other
        would wait a round trip more for the claim loop's own.)"""
        pending = self._pending
        share = self.rider.share if self.rider is not None and self.depth > 1 else 0
        if share and len(pending) > share:
            self._pending = pending[share:]
            return pending[:share]
        self._pending = []
        return pending

    async def _send(self, batch: list[Outcome]) -> None:
        try:
            await self._write(batch)
            self._delay = 0.05
        except (ConnectionLostError, OSError) as exc:
            self._ran.clear()  # a new connection, maybe to a new server
            # Re-sending is safe: a run that was already ended refuses the write.
            log.warning(
                "could not write the outcomes of %d job(s) (%s); writing them again",
                len(batch),
                exc,
            )
            self._pending = batch + self._pending
            await asyncio.sleep(self._delay * (1 + random.random()))
            self._delay = min(self._delay * 2, 5.0)
        except Exception:
            self._ran.clear()
            # A script refused the batch (a corrupt record, say): write the
            # jobs one by one, so one bad job cannot hold back the others.
            log.exception(
                "Redis refused the outcomes of %d job(s) written together; writing them one by one",
                len(batch),
            )
            await self._write_each(batch)
        finally:
            self._writing -= 1
            self._wake.set()  # the next batch may go; or nothing is left (idle)

    async def _write_each(self, batch: list[Outcome]) -> None:
        for outcome in batch:
            try:
                await self._write([outcome])
            except Exception as exc:
                # Give the job up: its lease lapses and the reaper recovers it.
                log.error(
                    "job %s: outcome could not be written (%s); left to lease expiry",
                    outcome[0],
                    exc,
                )
                self.on_written(outcome[0], "unwritten")

    async def _write(self, batch: list[Outcome]) -> None:
        done = [(i, t, o.result) for i, t, o in batch if isinstance(o, Success)]
        failed = [
            ops.FailItem(i, t, o.error, o.permanent, o.retry_delay_ms, random.random())
            for i, t, o in batch
            if isinstance(o, Failure)
        ]
        limited = [(i, t, o) for i, t, o in batch if isinstance(o, Limited)]
        deferred = [
            (i, t, o.delay_ms, o.checkpoint) for i, t, o in batch if isinstance(o, Deferred)
        ]
        maxlen = self.core.settings.events_maxlen
        calls = []
        if done:
            calls.append(ops.complete(self.core.keys, done, events_maxlen=maxlen))
        if failed:
            calls.append(ops.fail(self.core.keys, failed, events_maxlen=maxlen))
        for job_id, token, o in limited:  # rare: one call each
            calls.append(
                ops.rate_limited(
                    self.core.keys,
                    [(job_id, token)],
                    wait_ms=o.wait_ms,
                    scope=o.scope,
                    events_maxlen=maxlen,
                )  # fmt: skip
            )
        if deferred:
            calls.append(ops.defer(self.core.keys, deferred, events_maxlen=maxlen))
        scripts = {call.script for call in calls}
        # Redis answers NOSCRIPT to a script it has not loaded, and the runner sends that call
        # again after whatever was written behind it: only a batch whose scripts ran here
        # is sure to run before a claim written after it (in its pipeline or a later one)
        ahead = len(batch) if scripts <= self._ran else 0
        self.ahead += ahead
        try:
            ride = self.rider(self.ahead) if self.rider and ahead else None
            if ride is None:
                try:
                    replies = await self.runner.run_many(calls)
                except UnreplicatedWriteError as exc:
                    replies = raised(_stood(exc, len(batch)))
                self._record(done, failed, limited, deferred, replies)
                self._ran |= scripts
                return
            try:
                try:
                    results = await self.runner.run_many_settled([*calls, ride.call])
                except UnreplicatedWriteError as exc:
                    results = _stood(exc, len(batch))
            except BaseException as exc:
                ride.landed(exc)
                raise
            try:
                with translated():
                    self._record(done, failed, limited, deferred, raised(results[:-1]))
            finally:  # the claim ran: its jobs are ours whatever became of the outcomes
                ride.landed(results[-1])
        finally:  # the jobs it freed were dropped by _record, in the same step
            self.ahead -= ahead

    def _record(
        self,
        done: list[tuple[str, str, Any]],
        failed: list[ops.FailItem],
        limited: list[tuple[str, str, Limited]],
        deferred: list[tuple[str, str, int, Any]],
        replies: list[Any],
    ) -> None:
        """Tell on_written what became of each outcome, from the replies to
        the calls _write made of them (in that order)."""
        if deferred:
            replies, moved = replies[:-1], replies[-1]
            for (job_id, *_), ok in zip(deferred, moved, strict=True):
                self.on_written(job_id, "deferred" if int(ok) == 1 else "lost")
        if limited:
            replies, given_back = replies[: -len(limited)], replies[-len(limited) :]
            for (job_id, _, _), reply in zip(limited, given_back, strict=True):
                self.on_written(job_id, "rate_limited" if list(reply) == [1] else "lost")
        if done:
            for (job_id, _, _), ok in zip(done, ops.decode_complete(replies[0]), strict=True):
                self.on_written(job_id, "completed" if ok else "lost")
            if self.on_handed_off is not None and ops.handed_off(replies[0]):
                self.on_handed_off()
        if failed:
            for item, what in zip(failed, ops.decode_fail(replies[-1]), strict=True):
                self.on_written(item.id, what)
            if self.on_handed_off is not None and ops.fail_handed_off(replies[-1]):
                self.on_handed_off()


def _stood(failure: UnreplicatedWriteError, jobs: int) -> list[Any]:
    """The replies of outcomes the master applied though too few replicas
    confirmed them (min_replicas): the write stood, and a re-send would only
    be refused as a lease already ended."""
    if failure.replies is None:
        raise failure
    log.warning(
        "the outcomes of %d job(s) were written, but too few replicas confirmed them "
        "(a failover now may lose them): %s",
        jobs,
        failure,
    )
    return failure.replies

"""The claim loop of a worker: claim while slots are free, wait for slots
(a claim may ride behind the outcomes being written), block on Redis when
nothing is claimable (a claim riding behind the pop), and take claimed jobs in.
Worker (runtime.py) is built on it.

Across a network a turn of the slots is mostly waiting: the worker runs its
jobs in a fraction of a round trip. So with one queue over the lean wire, when
a round trip to Redis takes SPLIT_AT or more, the slots go round in
`acks.TURNS` turns, each claim asking for at most a turn's share: while one
turn's outcomes and the claim behind them are on the wire, the jobs of another
run. Every claim in flight counts against the slots until its reply is taken
in (`_riding`), so the worker never holds more than its concurrency
(docs/reliability.md G3). On loopback the round trip is Redis's own work, and
halved turns cost more script calls than they overlap: one turn."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import redis

from conveyor.errors import ConveyorError
from conveyor.protocol import ops
from conveyor.protocol.keys import WORKER_COMMANDS as COMMANDS
from conveyor.timeutil import to_ms
from conveyor.worker.acks import TURNS, Ride
from conveyor.worker.pool import log_failure
from conveyor.worker.queues import Lane, Turns
from conveyor.worker.tuning import AutoConcurrency
from conveyor.worker.waiting import Blocker, advance

if TYPE_CHECKING:
    from conveyor.worker.runtime import WorkerSettings

log = logging.getLogger("conveyor.worker")

# The shortest PING round trip (s) from which the slots go round in turns:
# loopback answers in 0.03-0.3 ms here, 1 ms added each way in 2.2 ms.
SPLIT_AT = 0.0005
# PINGs a worker sends at most to find it: one fast answer ends the probe, and
# a loaded host's loopback took 0.5 ms or more five times in a row once (CI).
PROBES = 10


class ClaimLoop:
    """What the claim loop needs of the worker, and the loop itself."""

    id: str
    settings: WorkerSettings
    _lanes: list[Lane]
    _turns: Turns
    _blocker: Blocker
    _stopping: bool
    _quiet: bool  # an operator asked it to stop claiming (obey)
    _slot_freed: asyncio.Event
    _wait_task: asyncio.Task[Any] | None
    _slot_turns: int  # claims in flight at once (_turns_of_slots), set by _measure_turns
    _parked: bool  # the claim loop waits for slots (_wait_for_slots)
    _claiming: bool  # the claim loop waits for the reply of its own claim
    _claims_out: int  # claims in flight on the queue's connection (the loop's and rides)
    _riding: int  # the jobs they asked for: held already, as far as slots go
    _rode: deque[tuple[ops.ClaimReply, int]]  # the replies of rides, for the loop
    _auto: AutoConcurrency | None
    _stepped_over: bool  # a claim left suspects ready since the last wake for them
    _largest: int
    _side_tasks: set[asyncio.Future[Any]]

    @property
    def _in_flight(self) -> int:
        """Leases held here (claimed, running or awaiting acknowledgement),
        in all its queues: what claims are bounded by, and what idleness means."""
        lanes = self._lanes
        if len(lanes) == 1:
            return lanes[0].jobs.holding + self._riding
        return sum(lane.jobs.holding for lane in lanes)

    @property
    def _turns_of_slots(self) -> int:
        """Claims in flight at once (and outcome batches: acks.AckBuffer.depth):
        TURNS with one queue over the lean wire across a network, else 1."""
        return self._slot_turns if len(self._lanes) == 1 else 1

    async def _measure_turns(self) -> None:
        """Go round in turns if the queue's connection is a slow one: no PING of
        up to PROBES answered within SPLIT_AT (at start; a network does not come
        and go, while a busy moment of the host does)."""
        wire = self._lanes[0].queue.runner.wire
        if len(self._lanes) > 1 or wire is None:
            return
        shortest = float("inf")
        for _ in range(PROBES):
            started = time.perf_counter()
            try:
                await wire.call("PING")
            except redis.RedisError:  # the claim loop meets it, and retries
                return
            shortest = min(shortest, time.perf_counter() - started)
            if shortest < SPLIT_AT:
                break
        self._slot_turns = turns = TURNS if shortest >= SPLIT_AT else 1
        log.debug("round trip %.2f ms: %d turn(s) of the slots", shortest * 1000, turns)

    def _low_water(self, capacity: int) -> int:
        """Free slots worth a claim: half of them; in turns, the smallest turn
        (the last: what the others' shares leave)."""
        turns = self._turns_of_slots
        if turns == 1:
            return max(1, capacity // 2)
        return max(1, capacity - (turns - 1) * self._share(capacity))

    def _share(self, capacity: int) -> int:
        """A turn's share of the slots: the most one claim asks for in turns,
        rounded up, so that the turns use every slot."""
        return max(1, -(-capacity // self._turns_of_slots))

    def _free(self, capacity: int) -> int:
        """Slots neither held nor asked for by a claim in flight (each job
        asked for counted at the largest task size, as _claim_count sizes it)."""
        return capacity - self._load - self._riding * self._largest

    def _claimable(self, capacity: int) -> int:
        """Slots the loop's own claim may ask for: the free ones, and in turns
        also those of the outcomes on the wire ahead of it (one connection:
        Redis frees them first, as for a ride; the claims riding behind them
        count as held). Without them a turn's slots would count twice while its
        outcomes and its next claim are out, and the last turn would never start."""
        free = self._free(capacity)
        if self._turns_of_slots > 1:
            free += self._lanes[0].jobs.outcomes_ahead
        return free

    async def _claim_loop(self) -> None:
        delay = 0.05
        woken: tuple[ops.ClaimReply, int] | None = None  # the claim that rode behind a wait
        while not self._stopping:
            if self._quiet:  # run what it holds, claim nothing, until stopped
                self._slot_freed.clear()
                await self._slot_freed.wait()
                continue
            if woken is None and self._rode:
                woken = self._rode.popleft()
            concurrency = self._capacity()
            free = self._claimable(concurrency)
            if (
                woken is None
                and self._in_flight
                and (
                    free < self._low_water(concurrency) or self._claims_out >= self._turns_of_slots
                )
            ):
                woken = await self._wait_for_slots()
                continue
            try:
                if woken is not None:
                    (reply, count), woken = woken, None
                elif len(self._lanes) == 1:
                    count = self._turn_count(free, concurrency)
                    reply = await self._claim(count)
                else:
                    count = self._claim_count(free)
                    reply = await self._turns.claim(count, self._claim)
                delay = 0.05
                if self._auto is not None:
                    self._auto.saw(self._in_flight)
            except (ConveyorError, redis.RedisError) as exc:
                # never exit on a failed claim: Redis may be back, or the
                # script refused one bad record and the next call goes on
                log.warning("could not claim jobs (%s); trying again", exc)
                await asyncio.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 5.0)
                continue
            if self._back_to_top(reply, count):
                continue
            if reply.held and self._takes_suspect:
                # it stepped over suspects for one of ours that has ended since it
                # was sent (a claim riding behind a wait or an outcome): take one now
                continue
            if self.settings.burst and self._drained(reply):
                if any(lane.jobs.held for lane in self._lanes):
                    # outcomes still to be written may make a flow's parent ready: write
                    # them, then claim again
                    await asyncio.gather(*(lane.jobs.outcomes_written() for lane in self._lanes))
                    continue
                return
            if self.settings.burst and self._in_flight and reply.next_due_ms is None:
                # draining: the next thing that can change is a job of ours
                # ending (a block on Redis would sit out idle_wait after it)
                await self._until_one_ends()
                continue
            if self._claims_out:
                # a claim still in flight may bring jobs: its reply first (and
                # the blocking claim below must not count on its slots)
                woken = await self._wait_for_slots(more=False)
                continue
            # nothing more is claimable now (claim.lua's marker says when it is)
            woken = await self._wait_for_work(reply)
        while self._claims_out:  # stopping: their jobs are taken in, then given back
            self._slot_freed.clear()
            await self._slot_freed.wait()

    async def _wait_for_slots(self, *, more: bool = True) -> tuple[ops.ClaimReply, int] | None:
        """Wait until a slot frees; meanwhile claims may ride behind the
        outcomes being written (_ride). Returns a ride's reply, if one landed.
        Returns without one when no claim is in flight (the loop may claim),
        or, if `more`, when a turn's share of slots is free beside those in
        flight (the loop claims for another turn)."""
        self._parked = True
        try:
            while not self._rode and not self._stopping:
                self._slot_freed.clear()
                await self._slot_freed.wait()
                if not self._claims_out:
                    break
                capacity = self._capacity()
                if (
                    more
                    and self._claims_out < self._turns_of_slots
                    and self._claimable(capacity) >= self._low_water(capacity)
                ):
                    break
        finally:
            self._parked = False
        return self._rode.popleft() if self._rode else None

    def _ride(self, acked: int) -> Ride | None:
        """A claim to send behind outcomes in their pipeline, while the claim
        loop waits for slots or for its own claim: `acked` jobs' outcomes are
        written ahead of it on the connection (this batch's and those still in
        flight), and Redis frees those first, so the claim counts them free
        and the worker never holds more than its concurrency. Up to a turn's
        share of the slots; at most TURNS claims in flight; only with one queue."""
        if not (self._parked or self._claiming) or self._stopping or self._quiet:
            return None
        if self._claims_out >= self._turns_of_slots:
            return None
        capacity = self._capacity()
        free = self._free(capacity) + acked
        if free < self._low_water(capacity):
            return None
        lane = self._lanes[0]
        count = self._turn_count(free, capacity)
        call = self._claim_call(lane, count)
        self._claims_out += 1
        self._riding += count

        def landed(result: Any) -> None:
            # in one step with taking its jobs in: they count as held from now
            self._claims_out -= 1
            self._riding -= count
            if not isinstance(result, BaseException):
                try:
                    self._rode.append((self._claimed(lane, call, result), count))
                except Exception:  # its leases lapse; the reaper hands the jobs on
                    log.exception("could not take in the jobs of a claim")
            self._slot_freed.set()

        return Ride(call, landed)

    def _turn_count(self, free: int, capacity: int) -> int:
        """Jobs to claim for `free` slots: all of them with one turn of the
        slots, else at most a turn's share, so the turns stay staggered."""
        turns = self._turns_of_slots
        count = self._claim_count(free)
        return count if turns == 1 else min(count, self._share(capacity))

    def _back_to_top(self, reply: ops.ClaimReply, count: int) -> bool:
        """After a claim that leased jobs: claim again (or wait for slots)
        from the loop's top, rather than block? Yes after a full claim (more
        may be ready), or short of slots. A claim that took
        fewer than it asked took all that was claimable (claim.lua sets the
        marker otherwise), so the worker blocks at once: a job enqueued
        meanwhile finds it waiting, not one round trip away."""
        if not reply.jobs:
            return False
        if len(reply.jobs) >= count or len(self._lanes) > 1:
            return True
        capacity = self._capacity()
        return self._claimable(capacity) < self._low_water(capacity)

    @property
    def _load(self) -> int:
        """The capacity taken by held jobs (units of task size), in all queues."""
        lanes = self._lanes
        if len(lanes) == 1:
            return lanes[0].jobs.load
        return sum(lane.jobs.load for lane in lanes)

    def _claim_count(self, free: int) -> int:
        """Jobs to claim for `free` units: as many as fit if all were of
        the largest size (so a claim overshoots by one job at most)."""
        return max(1, free // self._largest)

    def _capacity(self) -> int:
        """How many jobs (units of task size) may run here now."""
        return self.settings.concurrency if self._auto is None else self._auto.limit

    async def _until_one_ends(self) -> None:
        """Wait until a job running here ends (or the worker stops)."""
        self._slot_freed.clear()
        if self._in_flight and not self._stopping:
            await self._slot_freed.wait()

    def _drained(self, reply: ops.ClaimReply) -> bool:
        """Burst mode ends when nothing is ready or running here and no
        delayed job (a retry, say) comes due within idle_wait."""
        if self._in_flight:
            return False
        horizon = reply.now_ms + to_ms(self.settings.idle_wait)
        return reply.next_due_ms is None or reply.next_due_ms > horizon

    def _claim_call(self, lane: Lane, count: int) -> ops.Call:
        core = lane.queue.core
        return ops.claim(
            core.keys,
            worker_id=self.id,
            count=count,
            lease_ms=to_ms(self.settings.lease),
            token=os.urandom(8).hex(),
            promote=self.settings.promote_batch,
            events_maxlen=core.settings.events_maxlen,
            alone=self._takes_suspect,
            isolates=True,
        )

    @property
    def _takes_suspect(self) -> bool:
        """Whether a claim may lease a suspect (suspects.py): fewer than
        `suspects` held here, none of them running in the worker itself; else
        claims step over them."""
        held = 0
        for lane in self._lanes:
            if lane.jobs.suspects.unisolated:
                return False
            held += len(lane.jobs.suspects.ids)
        return held < self.settings.suspects

    async def _claim(self, count: int, lane: Lane | None = None) -> ops.ClaimReply:
        lane = lane or self._lanes[0]
        call = self._claim_call(lane, count)
        if len(self._lanes) > 1:
            return self._claimed(lane, call, await lane.queue.runner.run(call))
        # counted as held while in flight, so a ride sent meanwhile leaves its slots
        self._claiming = True
        self._claims_out += 1
        self._riding += count
        try:
            raw = await lane.queue.runner.run(call)
        finally:
            self._claiming = False
            self._claims_out -= 1
            self._riding -= count
        return self._claimed(lane, call, raw)  # in the same step: no slot counted twice

    def _claimed(self, lane: Lane, call: ops.Call, raw: Any) -> ops.ClaimReply:
        """Take in the jobs a claim leased."""
        reply = ops.decode_claim(raw)
        if reply.held:
            self._stepped_over = True
        token = call.args[3]
        assert isinstance(token, str)
        jobs = lane.jobs
        for claimed in reply.jobs:
            jobs.accept(claimed, token, reply.now_ms)
            if claimed.schedule:
                self._background(advance(lane.queue, claimed, reply.now_ms))
        return reply

    def _suspect_done(self) -> None:
        """A suspect held here ended: if claims stepped over others meanwhile,
        end our blocking wait (our wake key, §8.3), so the next claim may take
        one now rather than when a job is enqueued or idle_wait passes."""
        if self._stepped_over and not self._stopping:
            self._stepped_over = False
            lane = self._lanes[0]
            wake = lane.queue.core.keys.wake(self.id)
            self._background(lane.queue.client.zadd(wake, {"suspect": 0}))

    def _background(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)
        task.add_done_callback(log_failure)

    async def _wait_for_work(self, reply: ops.ClaimReply) -> tuple[ops.ClaimReply, int] | None:
        """Block on the wake marker until an enqueue, the next due time, or
        idle_wait — whichever comes first. No polling. Returns the claim that
        rode behind the wait and the count it asked for, if one did."""
        timeout = self.settings.idle_wait
        if reply.next_due_ms is not None:
            timeout = min(timeout, max(0.001, (reply.next_due_ms - reply.now_ms) / 1000))
        if self.settings.burst and not self._in_flight and reply.next_due_ms is None:
            timeout = min(timeout, 0.05)
        if self._stopping:
            return None
        self._wait_task = asyncio.create_task(self._block(timeout))
        try:
            claimed: tuple[ops.ClaimReply, int] | None = await self._wait_task
            return claimed
        except asyncio.CancelledError:
            if not self._stopping:
                raise
        except redis.RedisError as exc:
            log.warning("could not wait for jobs on Redis (%s); trying again", exc)
            await asyncio.sleep(0.1 + random.random() * 0.4)
        finally:
            self._wait_task = None
        return None

    async def _block(self, timeout: float) -> tuple[ops.ClaimReply, int] | None:
        """Block until woken; over the lean wire a claim rides behind the
        blocking pop in the same write, so Redis runs it the moment the pop
        returns: no round trip between waking and leasing. A claim refused
        (NOSCRIPT after a Redis restart, say) is simply left to the next
        claim of the loop."""
        if len(self._lanes) > 1:
            await self._turns.block(self._blocker, timeout, self._woken)
            return None
        lane = self._lanes[0]
        keys = lane.queue.core.keys
        pop = (keys.marker, keys.wake(self.id), timeout)
        count = self._claim_count(self._capacity() - self._load)
        call = self._claim_call(lane, count)
        script = lane.queue.core.scripts["claim"]
        replies = await self._blocker.bzpopmin_then(pop, script.sha, call)
        claimed = None
        if replies is None:
            popped = await self._blocker.bzpopmin(*pop)
        else:
            popped = replies[0]
            if not isinstance(replies[1], Exception):
                claimed = (self._claimed(lane, call, replies[1]), count)
        self._woken(lane, popped)
        return claimed

    def _woken(self, lane: Lane, popped: Any) -> None:
        """What woke us: `abort=<id>` on our wake key is a client's abort
        of a job we hold (abort.lua), `quiet` and `stop` an operator's
        command (obey); anything else only ends the wait."""
        if not popped or isinstance(popped, Exception):
            return
        member = ops.text(popped[1])
        if member.startswith("abort="):
            lane.jobs.abort([member.removeprefix("abort=")])
        elif member in COMMANDS:
            self.obey([member])

    def obey(self, commands: list[str]) -> None:
        """An operator's commands (Queue.quiet_worker / stop_worker), read from
        our wake key by the wait or the heartbeat; each may arrive twice."""
        if "stop" in commands and not self._stopping:
            self.stop()
        elif "quiet" in commands and not self._quiet:
            log.info("worker %s quiet: it claims no more jobs (stop it to end it)", self.id)
            self._quiet = True
            self._slot_freed.set()

    def stop(self) -> None:
        raise NotImplementedError  # the Worker's


class Rider:
    """The claim loop as the ack writer's rider (acks.AckBuffer.rider): a
    claim to send behind a batch, and how many batches may be in flight."""

    def __init__(self, loop: ClaimLoop) -> None:
        self._loop = loop

    @property
    def turns(self) -> int:
        return self._loop._turns_of_slots

    @property
    def share(self) -> int:
        return self._loop._share(self._loop._capacity())

    def __call__(self, acked: int) -> Ride | None:
        return self._loop._ride(acked)

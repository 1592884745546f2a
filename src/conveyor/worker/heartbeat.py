"""Lease renewal, the roll call and stalled-job recovery, on an OS thread.

A thread (with its own blocking Redis connection) keeps beating while a
handler hogs the event loop or the CPU: the GIL is handed over every few
milliseconds, so a busy handler cannot starve it.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable

import redis

from conveyor.client.core import QueueCore
from conveyor.client.transport import SyncRunner
from conveyor.errors import ConveyorError
from conveyor.protocol import ops
from conveyor.protocol.keys import WORKER_COMMANDS

log = logging.getLogger("conveyor.worker")

Leases = Callable[[], list[tuple[str, str]]]


class Heartbeat(threading.Thread):
    """Every `interval` s, on a fixed cadence: renew the held leases,
    announce the worker, and reap expired leases of any worker of the queue."""

    def __init__(
        self,
        *,
        runner: SyncRunner,
        core: QueueCore,
        worker_id: str,
        lease_ms: int,
        interval: float,
        info: Callable[[], str],
        leases: Leases,
        on_lost: Callable[[list[str]], None],
        on_aborted: Callable[[list[str]], None] = lambda ids: None,
        reap_batch: int = 100,
        on_reaped: Callable[[int, int], None] | None = None,
        after_beat: Callable[[SyncRunner], None] | None = None,
        on_handed_off: Callable[[], None] | None = None,
        on_commands: Callable[[list[str]], None] | None = None,
    ) -> None:
        super().__init__(name=f"conveyor-heartbeat-{worker_id}", daemon=True)
        self.runner = runner
        self.core = core
        self.worker_id = worker_id
        self.lease_ms = lease_ms
        self.interval = interval
        self.info = info
        self.leases = leases
        self.on_lost = on_lost
        self.on_aborted = on_aborted  # held jobs a client aborted (abort.lua)
        self.reap_batch = reap_batch
        self.on_reaped = on_reaped  # (recovered, failed) by this worker's reaper
        self.after_beat = after_beat  # e.g. the metrics flush, on the beat's connection
        self.on_handed_off = on_handed_off  # a final stall's flow hand-off is in the outbox
        self.on_commands = on_commands  # an operator's quiet / stop (Worker.obey)
        self._stop = threading.Event()
        # command reads left out by late beats (_maybe_read_commands); the first
        # beat reads, opening the commands' connection while the cadence starts
        self._skipped = 2

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        failures = 0
        due = time.monotonic()  # when this beat was meant to start
        while True:
            try:
                self.beat()
                self.reap()
                self._maybe_read_commands(due)
                if self.after_beat is not None:
                    self.after_beat(self.runner)
                if failures:
                    log.warning("heartbeat sent again after %d failed attempt(s)", failures)
                failures = 0
            except (ConveyorError, redis.RedisError) as exc:  # Redis away or full
                failures += 1
                if failures == 1 or failures % 10 == 0:  # not a line per attempt
                    log.warning(
                        "could not send the heartbeat (%d time(s) in a row): %s", failures, exc
                    )
            except Exception:  # never let the thread die silently
                failures += 1
                log.exception("heartbeat failed")
            due = self._next_due(due, failures)
            if self._stop.wait(max(0.0, due - time.monotonic())):
                return

    def _next_due(self, due: float, failures: int) -> float:
        """Beats keep a fixed cadence: the next one is due `interval` after
        this one was due, however long its round trips took (waiting a full
        interval after them renewed a lease every lease/3 plus two round
        trips). A beat already late goes at once, and the cadence restarts
        from it: late beats are not made up in a burst. After failures the
        pause backs off (`_backoff`), counted from now."""
        now = time.monotonic()
        if failures:
            return now + self._backoff(failures)
        return max(due + self.interval, now)

    def _backoff(self, failures: int) -> float:
        """After failures, up to 4x the period with jitter (a reconnect storm
        helps nobody), never past a lease's worth."""
        backoff = self.interval * min(4.0, 1.5**failures) * (0.75 + random.random() / 2)
        return min(backoff, self.lease_ms / 1000)

    def beat(self) -> None:
        call = ops.heartbeat(
            self.core.keys,
            worker_id=self.worker_id,
            lease_ms=self.lease_ms,
            worker_ttl_ms=int(self.interval * 3000) + 1000,
            info=self.info(),
            leases=self.leases(),
        )
        lost, aborted = ops.split_heartbeat(self.runner.run(call))
        if aborted:
            self.on_aborted(aborted)
        if lost:
            self.on_lost(lost)

    def _maybe_read_commands(self, due: float) -> None:
        """Read an operator's commands after the beat and its reap, unless the
        beat is already late (a slow link): then at least every third beat, so
        the round trip never costs the leases their cadence. A failed read (a
        user without ZMSCORE) costs only the commands."""
        if self.on_commands is None:
            return
        if time.monotonic() >= due + self.interval and self._skipped < 2:
            self._skipped += 1
            return
        self._skipped = 0
        self._read_commands_safely()

    def _read_commands_safely(self) -> None:
        assert self.on_commands is not None
        try:
            self.read_commands(self.on_commands)
        except (ConveyorError, redis.RedisError) as exc:
            log.warning("could not read an operator's commands for this worker: %s", exc)

    def read_commands(self, obey: Callable[[list[str]], None]) -> None:
        """An operator's commands on our wake key: a busy worker never pops
        it (only an idle wait does), so each beat looks (docs/protocol.md §8.3)."""
        key = self.core.keys.wake(self.worker_id)
        scores = self.runner.client.zmscore(key, list(WORKER_COMMANDS))
        found = [c for c, s in zip(WORKER_COMMANDS, scores, strict=True) if s is not None]
        if found:
            obey(found)

    def reap(self) -> None:
        """Reap, and again while a bound was hit and work is left (after a
        burst: thousands of expired records), for at most a quarter of the
        beat period, so the next beat stays on time."""
        call = ops.reap(
            self.core.keys, batch=self.reap_batch, events_maxlen=self.core.settings.events_maxlen
        )
        until = time.monotonic() + self.interval / 4
        while True:
            reply = ops.decode_reap(self.runner.run(call))
            if reply.recovered or reply.failed:
                log.warning(
                    "expired leases: %d job(s) back in the queue, %d failed for good "
                    "after too many stalls",
                    reply.recovered,
                    reply.failed,
                )
                if self.on_reaped is not None:
                    self.on_reaped(reply.recovered, reply.failed)
            if reply.sent and self.on_handed_off is not None:
                self.on_handed_off()
            if not reply.more or time.monotonic() >= until or self._stop.is_set():
                return

    def leave(self) -> None:
        """Drop this worker from the roll call (on shutdown)."""
        keys = self.core.keys
        self.runner.client.zrem(keys.workers, self.worker_id)
        self.runner.client.delete(keys.worker(self.worker_id))

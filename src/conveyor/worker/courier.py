"""Carrying flow hand-offs from this queue's outbox to parents in other
queues, and cancelling the children of cancelled parents (docs/protocol.md
§14.5, §14.9), on a thread of the worker: at once when a script the worker
ran said it wrote to the outbox (a run's end, a final stall, a step job's
failed wait), and every heartbeat interval as the safety net. The drain
itself is client/handoffs.py's.
"""

from __future__ import annotations

import logging
import threading
import time

import redis

from conveyor.client import handoffs
from conveyor.client.models import QueueSettings
from conveyor.client.sync import Queue
from conveyor.errors import ConveyorError

log = logging.getLogger("conveyor.worker")


class Courier(threading.Thread):
    """Drains one queue's outbox every `interval` s, and at once when nudged
    (a run of this worker left a hand-off there). Its own connections: to
    the queue, and by `url` to the queues of parents (on a cluster, each on
    its own slot's master)."""

    def __init__(
        self, queue_name: str, *, url: str, settings: QueueSettings, interval: float,
        batch: int = 200,
    ) -> None:  # fmt: skip
        super().__init__(name=f"conveyor-courier-{queue_name}", daemon=True)
        self.queue_name = queue_name
        self.url = url
        self.settings = settings
        self.interval = interval
        self.batch = batch
        self._own: Queue | None = None  # connected on first use, in this thread; peers by name
        self._wake = threading.Event()
        self._stopping = False

    def nudge(self) -> None:
        """Drain now (thread-safe)."""
        self._wake.set()

    def stop(self) -> None:
        """Drain once more (the hand-offs of this worker's last runs), stop,
        then close the connections."""
        self._stopping = True
        self._wake.set()
        if self.is_alive():
            self.join()
        if self._own is not None:
            self._own.close()

    def run(self) -> None:
        failures = 0
        while True:
            stopping = self._stopping  # once asked to stop: one last drain, then out
            self._wake.clear()  # a nudge during the drain makes the wait below return at once
            try:
                self.drain(self.interval)
                failures = 0
            except (ConveyorError, redis.RedisError) as exc:  # Redis away: the next round
                failures += 1
                if failures == 1 or failures % 10 == 0:
                    log.warning("carrying flow hand-offs failed (%d in a row): %s", failures, exc)
            except Exception:  # never let the thread die silently
                log.exception("carrying flow hand-offs failed")
            if stopping:
                return
            self._wake.wait(self.interval)

    def drain(self, budget: float) -> int:
        """Carry hand-offs and cancellations for at most `budget` seconds:
        this queue's outbox, then every outbox the carry wrote to (a parent
        failing towards its own parent, a cancelled child's subtree); returns
        how many entries were done. Each queue written to first passes the
        protocol check (§10)."""
        if self._own is None:
            self._own = Queue(self.queue_name, url=self.url, settings=self.settings)
        steps = handoffs.carry(
            self._own.core.keys.prefix, [self.queue_name],
            events_maxlen=self.settings.events_maxlen, until=time.monotonic() + budget,
            batch=self.batch,
        )  # fmt: skip
        return handoffs.carry_sync(self._own.peer, steps)

"""Carrying flow hand-offs from this queue's outbox to parents in other
queues, and cancelling the children of cancelled parents (docs/protocol.md
§14.5, §14.9), on a thread of the worker: every heartbeat interval, and at
once after one of the worker's runs left a hand-off there.

A drain reads a bounded batch of the outbox, applies it with flow_settle on
each parent queue's slot, and only then deletes the entries: a drainer that
dies in between leaves them for the next one, and applying an entry twice
changes nothing (its child's reference has left the parent's pending set).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict

import redis

from conveyor.client.models import QueueSettings
from conveyor.client.sync import Queue
from conveyor.client.transport import translated
from conveyor.errors import ConveyorError
from conveyor.protocol import flows, ops

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
        self._others: dict[str, Queue] = {}
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
        for queue in self._others.values():
            queue.close()

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

    def _queue(self, name: str) -> Queue:
        """A client of queue `name` (connected on first use, in this thread)."""
        if name not in self._others:
            queue = Queue(name, url=self.url, settings=self.settings)
            queue.check()
            self._others[name] = queue
        return self._others[name]

    def drain(self, budget: float) -> int:
        """Carry hand-offs for at most `budget` seconds (batch after batch
        while batches come back full); returns how many entries were done."""
        until = time.monotonic() + budget
        done = 0
        own = self._queue(self.queue_name)
        outbox = own.core.keys.outbox
        while True:
            with translated():
                entries = flows.decode_outbox(own.client.xrange(outbox, count=self.batch) or [])
            finished = self._settle([e for e in entries if e.op == ""])
            finished += [e.entry_id for e in entries if e.op == "cancel" and self._cancel(e)]
            if finished:
                with translated():
                    own.client.xdel(outbox, *finished)
                done += len(finished)
            if len(entries) < self.batch or time.monotonic() >= until:
                return done

    def _settle(self, hand_offs: list[flows.HandOff]) -> list[str]:
        """Apply hand-offs on their parents' slots; the entry ids applied."""
        by_queue: dict[str, list[flows.HandOff]] = defaultdict(list)
        for hand_off in hand_offs:
            by_queue[flows.split_reference(hand_off.parent)[0]].append(hand_off)
        for name, items in by_queue.items():
            parent = self._queue(name)
            maxlen = self.settings.events_maxlen
            parent.runner.run(flows.flow_settle(parent.core.keys, items, events_maxlen=maxlen))
        return [h.entry_id for h in hand_offs]

    def _cancel(self, entry: flows.HandOff) -> bool:
        """Cancel one batch of a cancelled parent's children (each cancel
        carries on down its own subtree); True when none is left."""
        own = self._queue(self.queue_name)
        key = own.core.keys.cancelling(flows.split_reference(entry.parent)[1])
        with translated():
            refs = [ops.text(r) for r in own.client.srandmember(key, self.batch) or []]
        by_queue: dict[str, list[str]] = defaultdict(list)
        for ref in refs:
            queue_name, child_id = flows.split_reference(ref)
            by_queue[queue_name].append(child_id)
        maxlen = self.settings.events_maxlen
        for name, ids in by_queue.items():
            queue = self._queue(name)
            queue.runner.run_many(
                [ops.cancel(queue.core.keys, i, events_maxlen=maxlen) for i in ids]
            )
        with translated():
            if refs:
                own.client.srem(key, *refs)
            return int(own.client.scard(key)) == 0

"""Carrying flow hand-offs from this queue's outbox to parents in other
queues (docs/protocol.md §14.5), on the heartbeat thread after each reap.

A drain reads a bounded batch of the outbox, applies it with flow_settle on
each parent queue's slot, and only then deletes the entries: a drainer that
dies in between leaves them for the next one, and applying an entry twice
changes nothing (its child's reference has left the parent's pending set).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict

from conveyor.client.core import QueueSettings
from conveyor.client.sync import Queue
from conveyor.client.transport import SyncRunner, translated
from conveyor.protocol import flows

log = logging.getLogger("conveyor.worker")


class Courier:
    """Drains one queue's outbox; parents' queues are reached by `url` (on a
    cluster, each on its own slot's master)."""

    def __init__(
        self, runner: SyncRunner, queue_name: str, *, url: str, settings: QueueSettings,
        batch: int = 200,
    ) -> None:  # fmt: skip
        self.runner = runner
        self.queue = Queue(queue_name, client=runner.client, settings=settings)
        self.url = url
        self.settings = settings
        self.batch = batch
        self._parents: dict[str, Queue] = {}

    def _parent_queue(self, name: str) -> Queue:
        if name not in self._parents:
            queue = Queue(name, url=self.url, settings=self.settings)
            queue.check()
            self._parents[name] = queue
        return self._parents[name]

    def drain(self, budget: float) -> int:
        """Carry hand-offs for at most `budget` seconds (batch after batch
        while batches come back full); returns how many were applied."""
        until = time.monotonic() + budget
        carried = 0
        outbox = self.queue.core.keys.outbox
        while True:
            with translated():
                entries = self.runner.client.xrange(outbox, count=self.batch)
            hand_offs = flows.decode_outbox(entries or [])
            by_queue: dict[str, list[flows.HandOff]] = defaultdict(list)
            for hand_off in hand_offs:
                by_queue[flows.split_reference(hand_off.parent)[0]].append(hand_off)
            for name, items in by_queue.items():
                parent = self._parent_queue(name)
                call = flows.flow_settle(
                    parent.core.keys, items, events_maxlen=self.settings.events_maxlen
                )
                parent.runner.run(call)
            if hand_offs:
                with translated():
                    self.runner.client.xdel(outbox, *[h.entry_id for h in hand_offs])
                carried += len(hand_offs)
            if len(hand_offs) < self.batch or time.monotonic() >= until:
                return carried

    def close(self) -> None:
        for queue in self._parents.values():
            queue.close()

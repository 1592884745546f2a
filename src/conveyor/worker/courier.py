"""Carrying flow hand-offs from this queue's outbox to parents in other
queues, and cancelling the children of cancelled parents (docs/protocol.md
§14.5, §14.9), on the heartbeat thread after each reap.

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
from conveyor.protocol import flows, ops

log = logging.getLogger("conveyor.worker")


class Courier:
    """Drains one queue's outbox; other queues are reached by `url` (on a
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
        self._others: dict[str, Queue] = {}

    def _queue(self, name: str) -> Queue:
        if name == self.queue.name:
            return self.queue
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
        outbox = self.queue.core.keys.outbox
        while True:
            with translated():
                entries = flows.decode_outbox(
                    self.runner.client.xrange(outbox, count=self.batch) or []
                )
            finished = self._settle([e for e in entries if e.op == ""])
            finished += [e.entry_id for e in entries if e.op == "cancel" and self._cancel(e)]
            if finished:
                with translated():
                    self.runner.client.xdel(outbox, *finished)
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
        key = self.queue.core.keys.cancelling(flows.split_reference(entry.parent)[1])
        with translated():
            refs = [ops.text(r) for r in self.runner.client.srandmember(key, self.batch) or []]
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
                self.runner.client.srem(key, *refs)
            return int(self.runner.client.scard(key)) == 0

    def close(self) -> None:
        for queue in self._others.values():
            queue.close()

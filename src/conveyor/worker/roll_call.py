"""A worker's entry in its queue's roll call (protocol §8.1), kept current.

Each heartbeat writes the entry whole and renews its TTL; between beats
(a third of the lease: 10 s by default) the figures an operator reads
(`running`, `processed`, `failed`, `concurrency`) would go stale, so the
event loop refreshes the entry about once a second, only when they changed:
one write a second at most, none while nothing moves, never one per job.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import redis
import redis.asyncio

from conveyor.errors import ConveyorError

log = logging.getLogger("conveyor.worker")


class RollCall:
    """One queue's entry of one worker: `describe()` gives its figures."""

    def __init__(self, describe: Callable[[], dict[str, Any]], key: str, *, every: float = 1.0):
        self._describe = describe
        self._key = key  # the worker's info key: worker:<id> of the queue
        self._every = every
        self._sent: dict[str, Any] | None = None  # the figures last written
        self._beat_at: float | None = None  # the last beat's time, kept by refreshes

    def for_beat(self) -> str:
        """The entry a heartbeat writes (on the heartbeat's thread)."""
        figures = self._describe()
        self._beat_at = time.time()
        self._sent = figures
        return self._text(figures, self._beat_at)

    async def run(self, client: redis.asyncio.Redis) -> None:
        """Refresh the entry while the figures move (until cancelled). SET XX
        KEEPTTL: a refresh never creates an entry the worker left, nor makes
        one live longer than its beats do."""
        while True:
            await asyncio.sleep(self._every)
            figures = self._describe()
            if self._beat_at is None or figures == self._sent:
                continue
            self._sent = figures
            try:
                await client.set(
                    self._key, self._text(figures, self._beat_at), xx=True, keepttl=True
                )
            except (ConveyorError, redis.RedisError, OSError) as exc:  # the beat writes it next
                log.debug("could not refresh the roll call: %s", exc)

    @staticmethod
    def _text(figures: dict[str, Any], beat_at: float) -> str:
        return json.dumps({**figures, "beat_at": beat_at})

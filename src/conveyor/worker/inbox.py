"""The accepted jobs waiting for one of a worker's runners (pool.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

from conveyor.worker.execution import Running


class Inbox:
    """Accepted jobs waiting for a runner. At most one idle runner is woken
    at a time: it takes the jobs one after another, and a runner about to
    suspend hands the rest on to the next (`hand_on`)."""

    def __init__(self) -> None:
        # read by the runners directly: a job waiting is taken without a coroutine call
        self.jobs: deque[Running] = deque()
        self._idle: deque[asyncio.Future[None]] = deque()
        self._waking = False  # a runner was woken and has not looked yet

    def put(self, running: Running) -> None:
        self.jobs.append(running)
        if not self._waking and self._idle:
            self.hand_on()

    def hand_on(self) -> None:
        """Wake an idle runner if jobs wait and none is on its way already."""
        if not self.jobs or self._waking:
            return
        while self._idle:
            waiter = self._idle.popleft()
            if not waiter.done():  # not a runner cancelled while idle
                waiter.set_result(None)
                self._waking = True
                return

    async def get(self) -> Running:
        while not self.jobs:
            waiter = asyncio.get_running_loop().create_future()
            self._idle.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():  # woken, then cancelled
                    self._waking = False
                    self.hand_on()
                with contextlib.suppress(ValueError):
                    self._idle.remove(waiter)
                raise
            self._waking = False
        return self.jobs.popleft()

    @property
    def waiting(self) -> int:
        return len(self.jobs)

    def take_all(self) -> list[Running]:
        jobs = list(self.jobs)
        self.jobs.clear()
        return jobs

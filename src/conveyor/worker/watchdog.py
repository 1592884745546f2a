"""A watchdog outside the event loop: it notices a handler that blocks the
loop, names it, and keeps a record of the stalls so that the jobs stuck
behind it are not failed for the time it stole from them.

An OS thread sends the loop a ping (`call_soon_threadsafe`) every `tick`
while jobs are held and waits for the answer. When the answer is late, it
looks at the loop thread's stack (`sys._current_frames`): the frame of an
async handler names the task, the frame of `execute` names the job. Nothing
is done per job on the loop: the cost is one ping per tick.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import types
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

log = logging.getLogger("conveyor.worker")

STALL_MIN = 0.2  # a late ping shorter than this is the loop's normal latency, not a stall


@dataclass(frozen=True, slots=True)
class Stall:
    """The loop was blocked from `start` to `end` (time.monotonic, the loop's
    clock) by the handler of job `job_id` (None when it could not be told)."""

    start: float
    end: float
    job_id: str | None


@dataclass(frozen=True, slots=True)
class Culprit:
    task: str
    job_id: str | None
    where: str  # file:line of the handler's frame

    def __str__(self) -> str:
        job = f" (job {self.job_id})" if self.job_id else ""
        return f"task {self.task!r}{job} at {self.where}"


class Stalls:
    """The recent stalls of the loop, read on the loop by the job deadlines."""

    def __init__(self, keep: int = 256) -> None:
        self._stalls: deque[Stall] = deque(maxlen=keep)
        # the stall going on, as the watchdog sees it: a job's step that runs
        # right after another's long one (both queued before the watchdog's
        # ping) must count it before the ping is answered
        self.current: Callable[[], Stall | None] = lambda: None

    def add(self, stall: Stall) -> None:
        self._stalls.append(stall)

    def credit(self, job_id: str, since: float, until: float) -> float:
        """Seconds within [since, until] the loop was blocked by other jobs'
        handlers (or by something unknown): time this job could not run."""
        total = 0.0
        current = self.current()
        for stall in self._stalls if current is None else [*self._stalls, current]:
            if stall.job_id != job_id:
                total += max(0.0, min(stall.end, until) - max(stall.start, since))
        return total


class LoopWatchdog(threading.Thread):
    """Pings the loop every `tick` s while `busy()`; reports a stall longer
    than `report_after` s with the handler that causes it."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        handlers: dict[types.CodeType, str],
        busy: Callable[[], bool],
        execute_code: types.CodeType,
        tick: float = 0.1,
        report_after: float = 1.0,
    ) -> None:
        super().__init__(name="conveyor-loop-watchdog", daemon=True)
        self.loop = loop
        self.loop_thread = threading.get_ident()  # built on the loop's thread
        self.stalls = Stalls()
        self.stalls.current = self._current
        self._handlers = handlers
        self._busy = busy
        self._execute_code = execute_code
        self._tick = tick
        self._report_after = report_after
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._sent: float | None = None  # when the unanswered ping was sent
        self._culprit: Culprit | None = None
        self._reported = False

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        while not self._stop.wait(self._tick):
            with self._lock:
                sent = self._sent
            if sent is None:
                if self._busy():
                    self._ping()
                continue
            self._watch(time.monotonic() - sent)

    def _ping(self) -> None:
        now = time.monotonic()
        with self._lock:
            self._sent, self._culprit, self._reported = now, None, False
        try:
            self.loop.call_soon_threadsafe(self._pong, now)
        except RuntimeError:  # the loop closed under us: nothing left to watch
            self._stop.set()

    def _watch(self, late: float) -> None:
        """The ping is `late` s unanswered: find who blocks, report once."""
        if late < self._tick:
            return
        culprit = self._culprit or self.find_culprit()
        with self._lock:
            if self._sent is None:  # answered meanwhile
                return
            self._culprit = culprit
            report = late >= self._report_after and not self._reported
            self._reported = self._reported or report
        if report:
            log.warning(
                "event loop blocked for %.1f s by %s: an async handler must not block "
                "(await, or run it with executor='thread' or 'process')",
                late,
                culprit or "code outside any handler",
            )

    def _current(self) -> Stall | None:
        """The stall going on now, if the ping is late enough to be one."""
        now = time.monotonic()
        with self._lock:
            sent, culprit = self._sent, self._culprit
        if sent is None or now - sent < STALL_MIN:
            return None
        return Stall(sent, now, culprit.job_id if culprit else None)

    def _pong(self, sent: float) -> None:
        """On the loop: the ping arrived; a late one was a stall."""
        now = time.monotonic()
        with self._lock:
            culprit, reported = self._culprit, self._reported
            self._sent = None
        if now - sent >= STALL_MIN:
            self.stalls.add(Stall(sent, now, culprit.job_id if culprit else None))
        if reported:
            log.warning("event loop free again after %.1f s (%s)", now - sent, culprit)

    def find_culprit(self) -> Culprit | None:
        """The async handler on the loop thread's stack, if any."""
        frame = sys._current_frames().get(self.loop_thread)
        task: Culprit | None = None
        for f in _outwards(frame):
            name = self._handlers.get(f.f_code)
            if name is not None and task is None:
                task = Culprit(name, None, f"{f.f_code.co_filename}:{f.f_lineno}")
            elif f.f_code is self._execute_code and task is not None:
                return Culprit(task.task, _job_id(f), task.where)
        return task


def _outwards(frame: types.FrameType | None) -> Iterable[types.FrameType]:
    while frame is not None:
        yield frame
        frame = frame.f_back


def _job_id(frame: types.FrameType) -> str | None:
    """The id of the job `execute` runs in `frame` (read from another thread:
    the frame is suspended in the handler's call, its locals are settled)."""
    running = frame.f_locals.get("running")
    ctx = getattr(running, "ctx", None)
    job_id = getattr(ctx, "id", None)
    return job_id if isinstance(job_id, str) else None

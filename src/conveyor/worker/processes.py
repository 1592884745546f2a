"""Process execution: a pool of child processes that run handlers, so that
CPU-bound jobs run beside each other and a job past its timeout can really be
stopped (its child is terminated and replaced).

The children come from a forkserver (spawn where there is none): never a
fork of this process, whose threads (heartbeat, job threads) a fork would
copy mid-step. A child is reused for job after job, and recycled after
`max_tasks_per_child` jobs or after a job that took its peak memory (RSS)
past `max_memory_per_child`.

The parent keeps everything about the job in Redis: the lease (its
heartbeat never depends on a child), the outcome's write, progress writes.
Over a pipe it sends the child the job's data and context, and gets back
progress reports and the outcome. A child that dies (killed, `os._exit`,
a crash, the OOM killer) fails only the job it ran, with ProcessDiedError
(retried by the job's policy), and is replaced at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import select
import signal
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from conveyor.client.tasks import Task
from conveyor.errors import ProcessDiedError
from conveyor.worker import child as child_side
from conveyor.worker.child import BEGUN_NS, DEPTH, PASSED, WITHDRAWN, Order, child_main
from conveyor.worker.context import JobContext
from conveyor.worker.execution import NOTHING, Deadline, Ended, Failure, Outcome, Running

log = logging.getLogger("conveyor.worker")

TERM_GRACE = 0.5  # s between SIGTERM and SIGKILL for a child that must stop
JOIN_LIMIT = 10.0  # s to wait for a child told to stop, or killed, to be gone


@dataclass(frozen=True, slots=True)
class PoolSettings:
    size: int
    max_tasks_per_child: int | None = None
    max_memory_per_child: int | None = None  # bytes of peak RSS
    runs_sync: bool = False  # sync handlers without an executor of their own run here
    # a busy child takes one more job to wait in its pipe; not for suspects, which must not
    # die with another's child
    send_ahead: bool = True


def needs_processes(handlers: dict[str, Task[Any, Any]], settings: PoolSettings) -> bool:
    """Whether any of these handlers runs in a child process."""
    return any(
        t.executor == "process" or (t.executor is None and not t.is_async and settings.runs_sync)
        for t in handlers.values()
    )


# --- the parent's side of one child --------------------------------------------------------


class ChildDied(Exception):
    pass


@dataclass(eq=False, slots=True)
class Ticket:
    """One job's run in the pool: waiting for a child, then sent to one."""

    order: Order
    tell: Callable[[str, Any], None]  # progress, log lines, checkpoints of the job
    deadline: Deadline | None  # armed when the job begins in its child
    outcome: asyncio.Future[Ended]  # the child's outcome, or ChildDied
    child: Child | None = None
    seq: int = 0  # its number in its child's stream of orders


class Child:
    """One child process and the jobs sent to it (`line`: the one it runs
    first, then at most one waiting in its pipe), seen from the parent's loop."""

    def __init__(self, process: BaseProcess, conn: Connection, state: Any, pool: ProcessPool):
        self.process = process
        self.conn = conn
        self.state = state  # [PASSED, WITHDRAWN, BEGUN_NS], under its lock
        self._withdrawn = 0  # the last order taken back: one at a time, passed before the next
        self.line: deque[Ticket] = deque()
        self.dead = False
        self._pool = pool
        self._seq = 0
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(conn.fileno(), self.drain)
        # whether more waits in the pipe: one poll object kept (Connection.poll
        # builds a selector per call, a tenth of the parent's time per job)
        self._ready: Callable[[], bool] = conn.poll
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(conn.fileno(), select.POLLIN)
            self._ready = lambda: bool(poller.poll(0))

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def room(self) -> bool:
        """Whether it takes one more job: an idle child does; a busy one
        takes one to wait in its pipe, once it has passed any taken back
        (the child knows one withdrawn order at a time)."""
        line = len(self.line)
        if not line:
            return True
        ahead = self._pool.settings.send_ahead
        return ahead and line < DEPTH and self.state[PASSED] >= self._withdrawn

    def send(self, ticket: Ticket) -> None:
        """Send one job: it begins when the ones before it in the line are done."""
        self._seq += 1
        ticket.child, ticket.seq = self, self._seq
        self.line.append(ticket)
        if len(self.line) == 1:
            self._begun(ticket)
        order = ticket.order  # a tuple: a dataclass pickles field by field, slowly
        sent = (ticket.seq, order.module, order.task, order.failures, order.job)
        with contextlib.suppress(OSError):  # it is gone: its reader reads what it sent, then EOF
            self.conn.send(sent)

    def _begun(self, ticket: Ticket) -> None:
        """The ticket is first in line: its child begins it now, or has (sent ahead)."""
        if ticket.deadline is not None:  # the timeout counts from here, not from the wait
            ticket.deadline.start(self._loop, lambda: self.began(ticket.seq))

    def began(self, seq: int) -> float | None:
        """When (loop time) the child began its order `seq`; None if it has
        not (yet), or cannot say. A fresh child imports the handler's module
        first, and a job sent ahead begins before the parent hears of it: the
        parent's own moment is off by either."""
        if self.dead or self.state is None:
            return None
        lock = self.state.get_lock()
        if not lock.acquire(timeout=0.05):
            return None
        try:
            if self.state[PASSED] != seq or self.state[WITHDRAWN] == seq:
                return None
            ago: float = (time.monotonic_ns() - int(self.state[BEGUN_NS])) / 1e9
        finally:
            lock.release()
        return self._loop.time() - max(0.0, ago)

    def withdraw(self, ticket: Ticket) -> bool:
        """Take back a job sent but not begun; False if it has begun (or the
        child, stuck, cannot say)."""
        if self.dead:
            return False
        lock = self.state.get_lock()
        if not lock.acquire(timeout=0.05):  # a child holds it for microseconds
            return False
        try:
            if self.state[PASSED] >= ticket.seq:
                return False
            self.state[WITHDRAWN] = self._withdrawn = ticket.seq
        finally:
            lock.release()
        self.line.remove(ticket)
        ticket.child = None
        return True

    def drain(self) -> None:
        """Read what the child sent: reports of its job, and outcomes (the
        pool gives it the next job in the same callback: no loop turn between jobs)."""
        while not self.dead:
            try:
                if not self._ready():
                    return
                kind, *rest = self.conn.recv()
            except (EOFError, OSError):
                self._died()
                return
            if not self.line:
                continue
            if kind == "done":
                self._done(*rest)
            else:
                self.line[0].tell(kind, rest[0])

    def _done(self, outcome: Ended | None, peak_rss: int, leaving: bool) -> None:
        ticket = self.line.popleft()
        if not ticket.outcome.done():
            ticket.outcome.set_result(NOTHING if outcome is None else outcome)
        if leaving:  # a limit recycles it: it begins nothing more
            self.dead = True
            self._loop.remove_reader(self.conn.fileno())
            self._pool.recycle(self, peak_rss)
            return
        if self.line:
            self._begun(self.line[0])
        self._pool.freed(self)

    def _died(self) -> None:
        if self.dead:
            return
        self.dead = True
        self._loop.remove_reader(self.conn.fileno())
        if self.line and not self.line[0].outcome.done():
            self.line[0].outcome.set_exception(ChildDied())  # its run reaps and replaces it
        else:
            self._pool.idle_death(self)

    async def stop(self, *, kill: bool) -> None:
        """End the child: ask it to leave (idle), or terminate it (busy)."""
        if not self.dead:
            self.dead = True
            self._loop.remove_reader(self.conn.fileno())
        if kill:
            with contextlib.suppress(OSError, ValueError):
                self.process.terminate()
        else:
            with contextlib.suppress(OSError):
                self.conn.send(None)
        await asyncio.to_thread(self.process.join, TERM_GRACE if kill else JOIN_LIMIT)
        if self.process.is_alive():
            self.process.kill()
            await asyncio.to_thread(self.process.join, JOIN_LIMIT)
        self.conn.close()
        self.state = None  # its lock is a semaphore: freed now, not at exit

    def how_it_died(self) -> str:
        code = self.process.exitcode
        if code is None:
            return "it is gone (no exit status)"
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-code).name}"
        return f"exit code {code}"


# --- the pool ------------------------------------------------------------------------------


class ProcessPool:
    """`size` children, reused; a busy one is terminated when its run is
    cancelled (timeout, lost lease, abort, shutdown) and replaced.

    Jobs wait in a line for a child. A child is sent its next job while it
    runs one (DEPTH), so it begins it the moment it is done, without waiting
    for the parent's loop to turn (that gap cost a tenth of the throughput of
    5 ms jobs, more on a loaded host). A job sent but not begun is taken back
    when it is cancelled, when its child dies or is recycled, and when
    another child falls idle (so no job waits behind a long one)."""

    def __init__(
        self,
        settings: PoolSettings,
        *,
        on_progress: Callable[[JobContext, float], None],
        deaths_stall: bool = False,
    ) -> None:
        self.settings = settings
        # a child's death writes no outcome: the lease lapses and the reaper counts a stall
        self._deaths_stall = deaths_stall
        self.runs_sync = settings.runs_sync
        self._on_progress = on_progress
        self._mp = _context()
        self._waiting: deque[Ticket] = deque()
        self._children: set[Child] = set()  # alive, or being stopped
        self._open: list[Child] = []  # those that take jobs
        self._background: set[asyncio.Task[None]] = set()
        self._closing = False

    def start(self) -> None:
        """Start the children in the background: a job waits for the first."""
        for _ in range(self.settings.size):
            self._background_task(self._add_child())

    @property
    def pids(self) -> list[int]:
        return [c.pid for c in self._children if c.pid is not None and not c.dead]

    async def run(self, running: Running) -> Outcome:
        """Run the job in a child; a cancellation terminates the child."""
        ctx = running.ctx
        order = Order(_module_of(running.handler), ctx.task, _is_failure(running), _fields(ctx))
        ticket = Ticket(
            order,
            lambda kind, value: self._tell(ctx, kind, value),
            running.deadline,
            asyncio.get_running_loop().create_future(),
        )
        self._waiting.append(ticket)
        self._dispatch()
        try:
            return await ticket.outcome
        except ChildDied:
            child = ticket.child
            assert child is not None
            await self._end(child, kill=True)  # reap it: its exit status says why
            err = ProcessDiedError(f"the child process running the job died: {child.how_it_died()}")
            if self._deaths_stall:
                log.warning("job %s: %s; it counts as a stall when its lease expires", ctx.id, err)
                return None
            log.warning("job %s: %s", ctx.id, err)
            return Failure(f"{type(err).__name__}: {err}", False, None, err)
        except asyncio.CancelledError:
            ctx.cancelled = True
            await asyncio.shield(self._background_task(self._cancelled(ticket)))
            raise

    async def _cancelled(self, ticket: Ticket) -> None:
        """A run cancelled: its job must not run on once the run ends."""
        if ticket.outcome.done() and not ticket.outcome.cancelled():
            ticket.outcome.exception()  # a death that raced the cancellation: seen
        child = ticket.child
        if child is None:  # still waiting: it never ran
            with contextlib.suppress(ValueError):
                self._waiting.remove(ticket)
            return
        for _ in range(3):
            child.drain()  # what it sent: the job before may be done, this one begun
            if child.dead or ticket not in child.line or ticket is child.line[0]:
                break
            if child.withdraw(ticket):
                self._dispatch()
                return
            if child.dead or child.state[PASSED] < ticket.seq:  # stuck: stop it, whatever it runs
                break
        if ticket in child.line:
            await self._end(child, kill=True)

    def _tell(self, ctx: JobContext, kind: str, value: Any) -> None:
        """A report of the child's job, written by the parent (on its loop)."""
        if kind == "progress":
            self._on_progress(ctx, value)
        elif kind == "log" and ctx.report_log is not None:
            ctx.report_log(ctx, value)
        elif kind == "checkpoint" and ctx.report_checkpoint is not None:
            ctx.report_checkpoint(ctx, value)

    async def close(self) -> None:
        self._closing = True
        self._open.clear()
        for ticket in self._waiting:
            ticket.outcome.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await asyncio.gather(*(c.stop(kill=False) for c in list(self._children)))
        self._children.clear()

    # --- children ------------------------------------------------------------------------

    def _dispatch(self) -> None:
        """Send waiting jobs to the children with the fewest (an idle one first)."""
        while self._waiting:
            ready = [c for c in self._open if c.room]
            if not ready:
                return
            ticket = self._waiting.popleft()
            if not ticket.outcome.done():  # else cancelled while it waited
                min(ready, key=lambda c: len(c.line)).send(ticket)

    def freed(self, child: Child) -> None:
        """A child's job is done: more for it, or one taken back from a busier child."""
        self._dispatch()
        if child.line or self._waiting or child not in self._open:
            return
        for other in self._open:
            if len(other.line) > 1:
                taken = other.line[-1]
                if other.withdraw(taken):
                    child.send(taken)
                    return

    def recycle(self, child: Child, peak_rss: int) -> None:
        """A child that reached a limit left after its job."""
        limit = self.settings.max_memory_per_child
        if limit is not None and peak_rss > limit:
            log.info(
                "child %s: peak memory %d MiB is over max_memory_per_child; recycling it",
                child.pid,
                peak_rss >> 20,
            )
        self._background_task(self._end(child, kill=False))

    def idle_death(self, child: Child) -> None:
        log.warning("idle child %s died (%s); replacing it", child.pid, child.how_it_died())
        self._background_task(self._end(child, kill=True))

    async def _end(self, child: Child, *, kill: bool) -> None:
        """Stop a child and start its replacement; the jobs sent to it but not
        begun go back to the front of the line."""
        if child in self._open:
            self._open.remove(child)
        await child.stop(kill=kill)
        begun = kill and child.line
        for ticket in reversed(list(child.line)[1 if begun else 0 :]):
            ticket.child = None
            self._waiting.appendleft(ticket)
        if begun and not child.line[0].outcome.done():  # stopped for another job's sake
            child.line[0].outcome.set_exception(ChildDied())
        child.line.clear()
        if child in self._children:
            self._children.discard(child)
            if not self._closing:
                self._background_task(self._add_child())
        self._dispatch()

    async def _add_child(self) -> None:
        delay = 0.1
        while not self._closing:
            try:
                process, conn, state = await asyncio.to_thread(self._spawn)
            except OSError as exc:  # out of processes or memory: try again, slower
                log.error("could not start a child process (%s); retrying", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            child = Child(process, conn, state, self)
            self._children.add(child)
            if self._closing:  # closed while it started
                await child.stop(kill=False)
                return
            self._open.append(child)
            self._dispatch()
            return

    def _spawn(self) -> tuple[BaseProcess, Connection, Any]:
        parent_end, child_end = self._mp.Pipe()
        state = self._mp.Array("q", 3)
        limits = self.settings
        process = self._mp.Process(
            target=child_main,
            args=(child_end, state, limits.max_tasks_per_child, limits.max_memory_per_child),
            name="conveyor-child",
            daemon=True,
        )
        process.start()
        child_end.close()  # the child's end lives in the child only: its death is our EOF
        return process, parent_end, state

    def _background_task(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task


def _context() -> Any:
    """forkserver where there is one (preloaded with the child's module, so a child
    starts in milliseconds), else spawn. Never fork: the worker has threads."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        mp = multiprocessing.get_context("forkserver")
        mp.set_forkserver_preload([child_side.__name__])
        return mp
    return multiprocessing.get_context("spawn")


def _module_of(handler: Task[Any, Any] | None) -> str:
    assert handler is not None
    return str(handler.fn.__module__)


def _is_failure(running: Running) -> bool:
    handler = running.handler
    assert handler is not None
    return handler.tasks.failure_handlers.get(handler.name) is handler


def _fields(ctx: JobContext) -> dict[str, Any]:
    return {
        "id": ctx.id,
        "queue": ctx.queue,
        "task": ctx.task,
        "data": ctx.data,
        "attempt": ctx.attempt,
        "token": ctx.token,
        "worker_id": ctx.worker_id,
        "headers": ctx.headers,
        "checkpoint": ctx.checkpoint,
    }

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
import importlib
import logging
import multiprocessing
import signal
import sys
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from conveyor import serializers
from conveyor.client.tasks import Task, Tasks
from conveyor.errors import ProcessDiedError
from conveyor.worker.context import JobContext, set_current
from conveyor.worker.execution import (
    NOTHING,
    Ended,
    Failure,
    Outcome,
    Running,
    Success,
    failure_of,
)

log = logging.getLogger("conveyor.worker")

TERM_GRACE = 0.5  # s between SIGTERM and SIGKILL for a child that must stop
JOIN_LIMIT = 10.0  # s to wait for a child told to stop, or killed, to be gone


@dataclass(frozen=True, slots=True)
class PoolSettings:
    size: int
    max_tasks_per_child: int | None = None
    max_memory_per_child: int | None = None  # bytes of peak RSS
    runs_sync: bool = False  # sync handlers without an executor of their own run here


def needs_processes(handlers: dict[str, Task[Any, Any]], settings: PoolSettings) -> bool:
    """Whether any of these handlers runs in a child process."""
    return any(
        t.executor == "process" or (t.executor is None and not t.is_async and settings.runs_sync)
        for t in handlers.values()
    )


@dataclass(frozen=True, slots=True)
class Order:
    """What a child needs to run one job: where the handler is, and the job."""

    module: str
    task: str
    failures: bool  # the handler is the task's failure handler
    job: dict[str, Any]  # JobContext's fields but report_progress


# --- the child -----------------------------------------------------------------------------


def child_main(conn: Connection) -> None:
    """A child's life: run orders until told to stop (None) or orphaned."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    handlers: dict[tuple[str, str, bool], Callable[[Any], Any]] = {}
    while True:
        try:
            order = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if order is None:
            return
        outcome = _run_order(order, handlers, conn)
        conn.send(("done", outcome, _peak_rss()))


def _run_order(
    order: Order, handlers: dict[tuple[str, str, bool], Callable[[Any], Any]], conn: Connection
) -> Ended:
    ctx = JobContext(
        **order.job,
        report_progress=lambda _, fraction: conn.send(("progress", fraction)),
        report_log=lambda _, lines: conn.send(("log", lines)),
        report_checkpoint=lambda _, state: conn.send(("checkpoint", state)),
    )
    set_current(ctx)
    try:
        key = (order.module, order.task, order.failures)
        fn = handlers.get(key) or handlers.setdefault(key, _find_handler(order))
        result = fn(ctx.data)
        if asyncio.iscoroutine(result):
            result = asyncio.run(result)
        if result is None:
            return NOTHING
        return Success(serializers.dumps(result, what="the result"))
    except Exception as exc:  # the exception stays here: its text and kind cross the pipe
        outcome = failure_of(exc)
        if isinstance(outcome, Failure):  # without the exception object: it may not pickle
            return Failure(outcome.error, outcome.permanent, outcome.retry_delay_ms)
        return outcome  # RateLimited / ResumeLater: plain values that cross the pipe
    finally:
        set_current(None)


def _find_handler(order: Order) -> Callable[[Any], Any]:
    """The handler, found again in the child: the `Tasks` of the handler's
    module that registered it (tasks must be defined at module level)."""
    module = importlib.import_module(order.module)
    for value in list(vars(module).values()):
        if isinstance(value, Tasks):
            table = value.failure_handlers if order.failures else value.handlers
            if order.task in table:
                return table[order.task].fn
    raise LookupError(
        f"task {order.task!r} not found in a module-level Tasks of module {order.module!r}: "
        "process execution needs handlers defined at module level"
    )


def _peak_rss() -> int:
    """This process's peak resident memory, in bytes."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # KiB on Linux


# --- the parent's side of one child --------------------------------------------------------


class ChildDied(Exception):
    pass


class Child:
    """One child process and the job it runs, seen from the parent's loop."""

    def __init__(
        self, process: BaseProcess, conn: Connection, on_message: Callable[[str, Any], None]
    ) -> None:
        self.process = process
        self.conn = conn
        self.jobs_done = 0
        self.dead = False
        self._on_message = on_message  # progress, log lines, checkpoints of the running job
        self._outcome: asyncio.Future[tuple[Ended, int]] | None = None
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(conn.fileno(), self._readable)
        self.on_idle_death: Callable[[Child], None] = lambda _: None

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def run(
        self, order: Order, on_message: Callable[[str, Any], None]
    ) -> asyncio.Future[tuple[Ended, int]]:
        """Send one job; the future gets (outcome, peak RSS) or ChildDied."""
        self._on_message = on_message  # progress, log lines, checkpoints of the running job
        self._outcome = self._loop.create_future()
        try:
            self.conn.send(order)
        except OSError:
            self._died()
        return self._outcome

    def _readable(self) -> None:
        try:
            while self.conn.poll():
                kind, *rest = self.conn.recv()
                if kind != "done":
                    self._on_message(kind, rest[0])
                elif self._outcome is not None and not self._outcome.done():
                    self._outcome.set_result((rest[0], rest[1]))
        except (EOFError, OSError):
            self._died()

    def _died(self) -> None:
        if self.dead:
            return
        self.dead = True
        self._loop.remove_reader(self.conn.fileno())
        if self._outcome is not None and not self._outcome.done():
            self._outcome.set_exception(ChildDied())
        else:
            self.on_idle_death(self)

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
    cancelled (timeout, lost lease, abort, shutdown) and replaced."""

    def __init__(
        self, settings: PoolSettings, *, on_progress: Callable[[JobContext, float], None]
    ) -> None:
        self.settings = settings
        self.runs_sync = settings.runs_sync
        self._on_progress = on_progress
        self._mp = _context()
        self._idle: deque[Child] = deque()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._children: set[Child] = set()
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
        child = await self._acquire()
        if running.deadline is not None:  # the timeout counts from here, not from the wait
            running.deadline.start(asyncio.get_running_loop())
        ctx = running.ctx
        order = Order(_module_of(running.handler), ctx.task, _is_failure(running), _fields(ctx))
        try:
            outcome, peak_rss = await child.run(
                order, lambda kind, value: self._tell(ctx, kind, value)
            )
        except ChildDied:
            await child.stop(kill=True)  # reap it: its exit status says why
            self._replace(child)
            err = ProcessDiedError(f"the child process running the job died: {child.how_it_died()}")
            log.warning("job %s: %s", ctx.id, err)
            return Failure(f"{type(err).__name__}: {err}", False, None, err)
        except asyncio.CancelledError:
            ctx.cancelled = True
            await asyncio.shield(self._background_task(self._end(child, kill=True)))
            raise
        child.jobs_done += 1
        self._release(child, peak_rss)
        return outcome

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
        for waiter in self._waiters:
            waiter.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await asyncio.gather(*(c.stop(kill=False) for c in list(self._children)))
        self._children.clear()

    # --- children ------------------------------------------------------------------------

    async def _acquire(self) -> Child:
        while True:
            while self._idle:
                child = self._idle.popleft()
                if not child.dead:
                    return child
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)

    def _put_idle(self, child: Child) -> None:
        self._idle.append(child)
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _release(self, child: Child, peak_rss: int) -> None:
        limits = self.settings
        if limits.max_memory_per_child is not None and peak_rss > limits.max_memory_per_child:
            log.info(
                "child %s: peak memory %d MiB is over max_memory_per_child; recycling it",
                child.pid,
                peak_rss >> 20,
            )
            self._background_task(self._end(child, kill=False))
        elif (
            limits.max_tasks_per_child is not None and child.jobs_done >= limits.max_tasks_per_child
        ):
            self._background_task(self._end(child, kill=False))
        else:
            self._put_idle(child)

    async def _end(self, child: Child, *, kill: bool) -> None:
        """Stop a child and start its replacement."""
        await child.stop(kill=kill)
        self._replace(child)

    def _replace(self, child: Child) -> None:
        self._children.discard(child)
        if not self._closing:
            self._background_task(self._add_child())

    async def _add_child(self) -> None:
        delay = 0.1
        while not self._closing:
            try:
                process, conn = await asyncio.to_thread(self._spawn)
            except OSError as exc:  # out of processes or memory: try again, slower
                log.error("could not start a child process (%s); retrying", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            child = Child(process, conn, lambda kind, value: None)
            child.on_idle_death = self._idle_death
            self._children.add(child)
            if self._closing:  # closed while it started
                await child.stop(kill=False)
                return
            self._put_idle(child)
            return

    def _spawn(self) -> tuple[BaseProcess, Connection]:
        parent_end, child_end = self._mp.Pipe()
        process = self._mp.Process(
            target=child_main, args=(child_end,), name="conveyor-child", daemon=True
        )
        process.start()
        child_end.close()  # the child's end lives in the child only: its death is our EOF
        return process, parent_end

    def _idle_death(self, child: Child) -> None:
        log.warning("idle child %s died (%s); replacing it", child.pid, child.how_it_died())
        self._background_task(self._end(child, kill=True))

    def _background_task(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task


def _context() -> Any:
    """forkserver where there is one (preloaded with this module, so a child
    starts in milliseconds), else spawn. Never fork: the worker has threads."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        mp = multiprocessing.get_context("forkserver")
        mp.set_forkserver_preload([__name__])
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

"""Tasks: named handlers of a queue, with typed enqueue calls.

    tasks = Tasks("emails")

    @tasks.task(max_failures=5)
    async def send(data: dict[str, str]) -> str: ...

    send.enqueue({"to": "a@example.com"}, delay=60)   # sync
    await send.aenqueue({"to": "b@example.com"})      # asyncio

A handler takes the job's data (any JSON value) and returns a JSON result;
`conveyor worker module:tasks` runs them.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, Unpack, cast, overload

from conveyor.client.aio import AsyncQueue
from conveyor.client.flows import FailurePolicy, FlowJob
from conveyor.client.models import Enqueued, EnqueueOptions, QueueSettings
from conveyor.client.sync import Queue
from conveyor.errors import ConfigurationError, UnknownOptionError
from conveyor.options import ENQUEUE_OPTIONS, check_name, check_task_name

D = TypeVar("D")
R = TypeVar("R")
Handler = Callable[[Any], Any]
EXECUTORS = frozenset({None, "thread", "process"})


@dataclass(frozen=True)
class Task(Generic[D, R]):
    """A handler registered under a name, with its default enqueue options."""

    name: str
    fn: Callable[[D], R] | Callable[[D], Awaitable[R]]
    tasks: Tasks
    defaults: EnqueueOptions = field(default_factory=lambda: EnqueueOptions())
    indexed: tuple[str, ...] = ()  # data fields the jobs are findable by (Queue.find)
    # where the handler runs: None (async on the worker's loop, sync as the
    # worker's `executor` says), "thread", or "process" (a child process)
    executor: str | None = None
    # a batch task's handler takes a list of jobs' data (worker/batches.py)
    batch_size: int | None = None
    batch_timeout: float = 1.0
    size: int = 1  # units of a worker's capacity one job takes

    @functools.cached_property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    def on_failure(self, handler: Callable[[Any], Any]) -> Task[Any, Any]:
        """Register `handler` to run, as a job of the queue's failure lane,
        when a job of this task fails for good (permanently, after its last
        retry, or after max_stalls). It gets `{"data", "error", "job"}` and is
        retried with a long backoff; run it with `conveyor worker --failures`."""
        failure: Task[Any, Any] = Task(self.name, handler, self.tasks)
        self.tasks.failure_handlers[self.name] = failure
        return failure

    def enqueue(self, data: D, **options: Unpack[EnqueueOptions]) -> Enqueued:
        return self.tasks.queue().enqueue(self.name, data, **self._options(data, options))

    async def aenqueue(self, data: D, **options: Unpack[EnqueueOptions]) -> Enqueued:
        queue = self.tasks.async_queue()
        return await queue.enqueue(self.name, data, **self._options(data, options))

    def node(
        self,
        data: D,
        *,
        children: Sequence[FlowJob] = (),
        on_fail: FailurePolicy = "fail",
        **options: Unpack[EnqueueOptions],
    ) -> FlowJob:
        """A node of a flow (Queue.enqueue_flow) that runs this task in its
        queue, after `children`; `on_fail`: what its failure does to its parent."""
        return FlowJob(
            task=self.name,
            data=data,
            queue=self.tasks.queue_name,
            on_fail=on_fail,
            children=children,
            options=self._options(data, options),
        )

    def _options(self, data: D, options: EnqueueOptions) -> EnqueueOptions:
        merged: EnqueueOptions = {**self.defaults, **options}
        if self.indexed and isinstance(data, dict):
            found = {f: data[f] for f in self.indexed if data.get(f) is not None}
            merged["index"] = {**found, **merged.get("index", {})}
        return merged


class Tasks:
    """The tasks of one queue, and the connection settings to reach it."""

    def __init__(
        self,
        queue: str = "default",
        *,
        url: str | None = None,
        settings: QueueSettings | None = None,
    ) -> None:
        self.queue_name = check_name(queue, "queue name")
        self.url = url
        self.settings = settings or QueueSettings()
        self.handlers: dict[str, Task[Any, Any]] = {}
        self.failure_handlers: dict[str, Task[Any, Any]] = {}
        self._queue: Queue | None = None
        self._async_queue: AsyncQueue | None = None

    def __repr__(self) -> str:
        return f"Tasks({self.queue_name!r}, {sorted(self.handlers)})"

    @overload
    def task(self, fn: Callable[[D], R], /) -> Task[D, R]: ...

    @overload
    def task(
        self,
        *,
        name: str | None = None,
        indexed: tuple[str, ...] = (),
        executor: str | None = None,
        batch_size: int | None = None,
        batch_timeout: float = 1.0,
        size: int = 1,
        **defaults: Unpack[EnqueueOptions],
    ) -> Callable[[Callable[[D], R]], Task[D, R]]: ...

    def task(  # type: ignore[misc]  # one implementation serves both forms
        self,
        fn: Any = None,
        /,
        *,
        name: str | None = None,
        indexed: tuple[str, ...] = (),
        executor: str | None = None,
        batch_size: int | None = None,
        batch_timeout: float = 1.0,
        size: int = 1,
        **defaults: Any,
    ) -> Any:
        """Register a handler (sync or async) under its name or `name`;
        `executor="process"` runs it in the worker's child processes (see
        the README's execution section), `"thread"` in its thread pool.
        With `batch_size`, the handler takes a list of up to that many jobs'
        data, gathered for at most `batch_timeout` s, and returns one result
        (or exception instance) per job. `size`: how many units of a
        worker's concurrency one job takes (a heavy job counts as several)."""
        unknown = set(defaults) - ENQUEUE_OPTIONS
        if unknown:
            raise UnknownOptionError(f"unknown task option(s): {sorted(unknown)}")
        if executor not in EXECUTORS:
            raise ConfigurationError("executor must be 'thread', 'process' or None")
        if batch_size is not None and (batch_size < 1 or executor == "process"):
            raise ConfigurationError("batch_size must be at least 1, and not with processes")
        if not batch_timeout > 0:
            raise ConfigurationError("batch_timeout must be > 0")
        if size < 1:
            raise ConfigurationError("size must be at least 1")

        def register(handler: Callable[[Any], Any]) -> Task[Any, Any]:
            task_name = check_task_name(name or handler.__name__)
            if task_name in self.handlers:
                raise ConfigurationError(f"task {task_name!r} is registered twice")
            task: Task[Any, Any] = Task(
                task_name,
                handler,
                self,
                cast(EnqueueOptions, defaults),
                tuple(indexed),
                executor,
                batch_size,
                float(batch_timeout),
                size,
            )
            self.handlers[task_name] = task
            return task

        return register(fn) if fn is not None else register

    def queue(self) -> Queue:
        """The sync producer client for this queue (created on first use)."""
        if self._queue is None:
            self._queue = Queue(self.queue_name, url=self.url, settings=self.settings)
        return self._queue

    def async_queue(self) -> AsyncQueue:
        """The asyncio producer client for this queue (created on first use)."""
        if self._async_queue is None:
            self._async_queue = AsyncQueue(self.queue_name, url=self.url, settings=self.settings)
        return self._async_queue

"""Conveyor in a FastAPI or Starlette app: queues opened by the app's lifespan, handed to
endpoints as dependencies.

    conveyor = ConveyorLifespan(tasks)                 # one or more Tasks
    app = FastAPI(lifespan=conveyor)

    @app.post("/thumbnails")
    async def create(path: str, queue: Annotated[AsyncQueue, Depends(conveyor.async_queue())]):
        job = await queue.enqueue("thumbnail", {"path": path})

The lifespan opens one `AsyncQueue` (on the app's event loop) and one sync `Queue` (for `def`
endpoints, which run in a thread pool) per queue, checks the server at startup so a wrong URL
fails the start rather than the first request, and closes them at shutdown. The queues live in
the lifespan state (`request.state.conveyor`), not in module globals: each app, and each
`TestClient`, gets its own, on its own loop. To combine with your own lifespan:

    @asynccontextmanager
    async def lifespan(app):
        async with conveyor(app) as state:
            yield {**state, "db": ...}
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from starlette.requests import HTTPConnection

from conveyor.client.aio import AsyncQueue
from conveyor.client.sync import Queue
from conveyor.client.tasks import Tasks
from conveyor.errors import ConfigurationError

STATE_KEY = "conveyor"


@dataclass(frozen=True, slots=True)
class OpenQueues:
    """The queues an app's lifespan opened, by name."""

    async_queues: dict[str, AsyncQueue]
    queues: dict[str, Queue]


class ConveyorLifespan:
    """A Starlette/FastAPI lifespan that opens the queues of `tasks` for the app's lifetime.
    `url` overrides the Tasks' own URL (default: theirs, else CONVEYOR_REDIS_URL)."""

    def __init__(self, *tasks: Tasks, url: str | None = None) -> None:
        if not tasks:
            raise ConfigurationError("ConveyorLifespan needs at least one Tasks")
        names = [t.queue_name for t in tasks]
        if len(set(names)) != len(names):
            raise ConfigurationError(f"two Tasks of the same queue: {sorted(names)}")
        self.tasks = tasks
        self.url = url

    @asynccontextmanager
    async def __call__(self, app: object) -> AsyncIterator[dict[str, Any]]:
        async with AsyncExitStack() as stack:
            opened = OpenQueues({}, {})
            for tasks in self.tasks:
                url = self.url or tasks.url
                aqueue = AsyncQueue(tasks.queue_name, url=url, settings=tasks.settings)
                stack.push_async_callback(aqueue.close)
                queue = Queue(tasks.queue_name, url=url, settings=tasks.settings)
                stack.callback(queue.close)
                await aqueue.check()  # a wrong URL or an evicting server stops the start
                opened.async_queues[tasks.queue_name] = aqueue
                opened.queues[tasks.queue_name] = queue
            yield {STATE_KEY: opened}

    # The dependencies are coroutine functions: FastAPI runs a plain `def` dependency in its
    # thread pool, a hop per request for what is a dictionary lookup.

    def async_queue(
        self, name: str | None = None
    ) -> Callable[[HTTPConnection], Awaitable[AsyncQueue]]:
        """A dependency giving the `AsyncQueue` of `name` (default: the first Tasks')."""
        wanted = self._name(name)

        async def dependency(connection: HTTPConnection) -> AsyncQueue:
            return _opened(connection).async_queues[wanted]

        return dependency

    def queue(self, name: str | None = None) -> Callable[[HTTPConnection], Awaitable[Queue]]:
        """A dependency giving the sync `Queue` of `name`, for `def` endpoints."""
        wanted = self._name(name)

        async def dependency(connection: HTTPConnection) -> Queue:
            return _opened(connection).queues[wanted]

        return dependency

    def _name(self, name: str | None) -> str:
        if name is None:
            return self.tasks[0].queue_name
        if name not in {t.queue_name for t in self.tasks}:
            raise ConfigurationError(f"no Tasks of queue {name!r} in this lifespan")
        return name


def _opened(connection: HTTPConnection) -> OpenQueues:
    opened = getattr(connection.state, STATE_KEY, None)
    if not isinstance(opened, OpenQueues):
        raise ConfigurationError(
            "Conveyor's lifespan has not run: pass lifespan=ConveyorLifespan(...) to the app "
            "(and in tests enter the client: `with TestClient(app) as client`; httpx's "
            "ASGITransport runs no lifespan: wrap the app in asgi_lifespan.LifespanManager)"
        )
    return opened

"""The dashboard's ASGI app: settings, the queues it reads, routes."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, pass_context, select_autoescape
from starlette.applications import Starlette
from starlette.datastructures import URL
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Receive, Scope, Send

from conveyor.client.aio import AsyncQueue
from conveyor.client.models import QueueSettings
from conveyor.errors import ConnectionLostError
from conveyor.integrations.prometheus import metrics_app
from conveyor.integrations.web import actions, busy, pages
from conveyor.integrations.web.access import Access, AuthHook
from conveyor.integrations.web.formatting import FILTERS
from conveyor.integrations.web.ops import LANE
from conveyor.options import check_name

HERE = Path(__file__).parent


@dataclass(frozen=True, kw_only=True)
class DashboardSettings:
    """What the dashboard shows and who may use it.

    `queues`: the queues to show; empty shows every queue in the server's
    registry (`<prefix>:queues`). `read_only` hides and refuses every action.
    `auth` is called with each request (True lets it through); `token`
    and `basic` ("user:password") are the simple alternatives."""

    url: str | None = None
    queues: tuple[str, ...] = ()
    prefix: str = "conveyor"
    read_only: bool = False
    auth: AuthHook | None = None
    token: str | None = None
    basic: str | None = None
    page_size: int = 50


class Queues:
    """The AsyncQueues the pages read, made on first use, one set per event loop
    (a redis.asyncio connection belongs to the loop that opened it)."""

    def __init__(self, settings: DashboardSettings) -> None:
        self.settings = settings
        self.queue_settings = QueueSettings(prefix=settings.prefix, eviction_check="ignore")
        self._by_loop: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str, AsyncQueue]
        ] = weakref.WeakKeyDictionary()

    def get(self, name: str) -> AsyncQueue:
        """The queue `name`, or the failure lane of `<queue>:failures`
        (ValidationError for a name no queue can have)."""
        loop = asyncio.get_running_loop()
        made = self._by_loop.setdefault(loop, {})
        if name not in made:
            base = name.removesuffix(LANE)
            made[name] = AsyncQueue(
                check_name(base, "queue name"), url=self.settings.url,
                settings=self.queue_settings, failures=base != name,
            )  # fmt: skip
        return made[name]

    async def open(self, name: str) -> AsyncQueue:
        """The queue `name` (or its failure lane) if the dashboard shows it (named
        in the settings, else in the registry): a made-up name opens no connection."""
        if name.removesuffix(LANE) not in await self.names():
            raise LookupError(f"no queue named {name!r} on this server")
        return self.get(name)

    async def names(self) -> list[str]:
        if self.settings.queues:
            return list(self.settings.queues)
        return await self.get("default").known_queues()  # any queue reads the registry

    async def close(self) -> None:
        for made in list(self._by_loop.values()):
            for queue in made.values():
                await queue.close()
            made.clear()


class QueueMetrics:
    """`/metrics`: the shown queues' state in Prometheus's text format, read at
    each scrape through conveyor.integrations.prometheus (behind the same access)."""

    def __init__(self, queues: Queues) -> None:
        self.queues = queues

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            shown = [self.queues.get(name) for name in await self.queues.names()]
            await metrics_app(shown)(dict(scope), receive, send)
        except ConnectionLostError:  # raised before any byte of the answer was sent
            body = b"# Redis is unreachable\n# TYPE conveyor_up gauge\nconveyor_up 0\n"
            await PlainTextResponse(body, status_code=503)(scope, receive, send)


def with_dashboard(app: ASGIApp, prefix: str, dashboard: ASGIApp) -> ASGIApp:
    """`app` with the dashboard answering under `prefix`: for ASGI apps that
    cannot mount another (Django's `get_asgi_application()`)."""
    prefix = "/" + prefix.strip("/")

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] in ("http", "websocket") and (
            path == prefix or path.startswith(prefix + "/")
        ):
            root = scope.get("root_path", "") + prefix
            await dashboard({**scope, "root_path": root}, receive, send)
        else:
            await app(scope, receive, send)

    return route


@pass_context
def url_for(context: dict[str, Any], name: str, /, **path_params: Any) -> URL:
    """A link of this site as a path: never built from the request's Host header."""
    request: Request = context["request"]
    return URL(request.url_for(name, **path_params).path)


async def favicon(request: Request) -> Response:
    return FileResponse(HERE / "static" / "favicon.svg", media_type="image/svg+xml")


async def unreachable(request: Request, exc: Exception) -> Response:
    """Redis did not answer: a page that says so (naming no URL: it may hold a password)."""
    response: Response = request.app.state.templates.TemplateResponse(
        request, "unreachable.html", {"read_only": True}, status_code=503
    )
    return response


def dashboard_app(settings: DashboardSettings | None = None) -> Starlette:
    """The dashboard as an ASGI app; mount it anywhere (`Mount("/conveyor", app)`)."""
    settings = settings or DashboardSettings()
    queues = Queues(settings)
    environment = Environment(
        loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape()
    )
    environment.filters.update(FILTERS)
    environment.globals["url_for"] = url_for
    templates = Jinja2Templates(env=environment)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await queues.close()

    app = Starlette(
        routes=[
            *pages.routes(),
            *busy.routes(),
            *actions.routes(),
            Route("/metrics", QueueMetrics(queues), name="metrics"),
            Route("/favicon.ico", favicon, name="favicon"),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ],
        middleware=[
            Middleware(Access, auth=settings.auth, token=settings.token, basic=settings.basic)
        ],
        exception_handlers={ConnectionLostError: unreachable},
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.queues = queues
    app.state.templates = templates
    return app

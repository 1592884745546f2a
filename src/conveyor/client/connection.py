"""Where and how Conveyor connects: the Redis URL, the connection options
every client uses, the lean wire's endpoint and the route of a queue on a
cluster or behind Sentinel.
No I/O here but one: with no URL configured, resolve_url probes the
embedded server's socket (a PING)."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from redis.connection import parse_url

from conveyor.client.cluster import Route, SlotRoute, is_cluster_url
from conveyor.client.endpoint import Endpoint
from conveyor.client.local import DATA_DIR_ENV, default_data_dir, running_url
from conveyor.client.sentinel import SentinelRoute, is_sentinel_url, parse_sentinel_url
from conveyor.errors import ConfigurationError
from conveyor.protocol.keys import QueueKeys

URL_VARIABLES = ("CONVEYOR_REDIS_URL", "REDIS_URL")


def resolve_url(url: str | None) -> str:
    """The Redis URL: the argument, else CONVEYOR_REDIS_URL, else REDIS_URL,
    else the embedded Redis running in the data directory the CLI uses
    ($CONVEYOR_DATA_DIR, else ./.conveyor), found the same way the CLI
    finds it (client/local.py)."""
    if url:
        return check_url(url)
    for name in URL_VARIABLES:
        if os.environ.get(name):
            return check_url(os.environ[name], name)
    found = running_url()
    if found is not None:
        return found
    data_dir = default_data_dir().resolve()
    raise ConfigurationError(
        f"no Redis URL, and no embedded Redis runs in {data_dir}. Start one there "
        f"(it stays up until Ctrl-C) with:\n\n    {_start_line(data_dir)}\n\n"
        "or point Conveyor at a server: pass url=..., or\n\n"
        "    export CONVEYOR_REDIS_URL=redis://127.0.0.1:6379/0\n"
    )


URL_SCHEMES = (
    "redis://", "rediss://", "unix://", "redis+cluster://", "rediss+cluster://",
    "redis+sentinel://", "rediss+sentinel://",
)  # fmt: skip
_PASSWORD = re.compile(r"(//[^:/@]*):[^@/]*@")
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&]*")


def shown_url(url: str) -> str:
    """`url` fit for a log line or an error: its password hidden."""
    return _QUERY_PASSWORD.sub(r"\1***", _PASSWORD.sub(r"\1:***@", url))


def check_url(url: str, source: str = "url") -> str:
    """`url` if it is a Redis URL Conveyor can use, else a ConfigurationError
    that shows it (password hidden) and the forms that work."""
    shown = shown_url(url)
    if not url.startswith(URL_SCHEMES):
        raise ConfigurationError(
            f"{source} {shown!r} is not a Redis URL: use redis://host:6379/0, rediss://... "
            "(TLS), unix:///path/to/redis.sock, redis+cluster://host:port, or "
            "redis+sentinel://host:26379/<service>"
        )
    if is_sentinel_url(url):
        parse_sentinel_url(url)  # a ConfigurationError that says what is wrong
    elif not is_cluster_url(url):
        try:
            parse_url(url)  # type: ignore[no-untyped-call]
        except ValueError as exc:
            raise ConfigurationError(
                f"{source} {shown!r} is not a valid Redis URL: {exc}"
            ) from None
        _check_database(url, source, shown)
    return url


def _check_database(url: str, source: str, shown: str) -> None:
    """redis-py reads database 0 from a path that is not a number: refuse it."""
    path = "" if url.startswith("unix://") else unquote(urlsplit(url).path).strip("/")
    if path and not path.isdigit():
        raise ConfigurationError(
            f"{source} {shown!r}: the database {path!r} is not a number (redis://host:6379/0)"
        )


def _start_line(data_dir: Path) -> str:
    """The shell line that starts the embedded Redis this process would find."""
    if data_dir == (Path.cwd() / ".conveyor").resolve():
        return f"cd {shlex.quote(str(Path.cwd()))} && conveyor redis"
    return f"{DATA_DIR_ENV}={shlex.quote(str(data_dir))} conveyor redis"


# Every connection Conveyor opens: a dead server is noticed within
# SOCKET_TIMEOUT on ordinary commands; blocking commands wait in slices
# shorter than it (see block_slice).
SOCKET_TIMEOUT = 10.0
CONNECTION_OPTIONS: dict[str, Any] = {
    "socket_connect_timeout": 5.0,
    "socket_timeout": SOCKET_TIMEOUT,
    "socket_keepalive": True,
}


def connection_options(url: str, **overrides: Any) -> dict[str, Any]:
    """redis-py options for `url`: keepalive is a TCP option, refused on a unix socket."""
    options = {**CONNECTION_OPTIONS, **overrides}
    if url.startswith("unix://"):
        options.pop("socket_keepalive", None)
    return options


def wire_endpoint(url: str, route: Route | None = None) -> Endpoint | None:
    """Where the lean script wire connects, or None to stay on redis-py
    (always with CONVEYOR_WIRE=0); on a cluster or Sentinel, wherever `route` says."""
    if os.environ.get("CONVEYOR_WIRE") == "0":
        return None
    return Endpoint.from_url(
        url,
        connect_timeout=CONNECTION_OPTIONS["socket_connect_timeout"],
        socket_timeout=SOCKET_TIMEOUT,
        route=route,
    )


def needs_route(url: str, route: Route | None) -> Route | None:
    """`route`; a Sentinel URL's own without one; a cluster URL without one
    is an error (which slot?)."""
    if route is None and is_sentinel_url(url):
        return SentinelRoute(url)
    if route is None and is_cluster_url(url):
        raise ConfigurationError(
            "a redis+cluster:// URL serves one queue's slot: connect through Queue or "
            "AsyncQueue (or pass route=slot_route(url, keys))"
        )
    return route


def slot_route(url: str, keys: QueueKeys) -> Route | None:
    """For a redis+cluster:// URL, the route to the master of the queue's
    slot (every key of a queue is in it); for a redis+sentinel:// URL, to the
    service's master; None for a single server."""
    if is_sentinel_url(url):
        return SentinelRoute(url)
    if not is_cluster_url(url):
        return None
    return SlotRoute.for_tag(url, keys.base)


def block_slice(connection_kwargs: Mapping[str, Any], wanted: float) -> float:
    """How long one blocking command may wait: `wanted`, but a second short
    of the client's socket timeout, or redis-py gives up on the socket."""
    socket_timeout = connection_kwargs.get("socket_timeout")
    if socket_timeout:
        wanted = min(wanted, max(0.01, float(socket_timeout) - 1.0))
    return max(0.01, wanted)

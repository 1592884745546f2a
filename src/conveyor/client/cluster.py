"""Redis Cluster: a queue talks only to the master that serves its slot.

Every key of a queue shares one hash tag, so a queue lives in one slot and
needs one node, never a cluster client that routes each command. A
`redis+cluster://host:port[,host:port...]` URL names seed nodes; a
`SlotRoute` asks them (`CLUSTER SLOTS`) which master serves the queue's slot,
and every connection of the queue (redis-py's and the lean wire's) connects
there. A MOVED reply (a reshard or a failover) re-points the route at the
node it names and drops the connection; CLUSTERDOWN or a connection that
cannot be made forgets the route, so the next connection asks the seeds
(and the masters seen so far) again.

The refused command was not applied, so it may be sent again: redirects are
raised as `SlotRedirect`, a redis-py ConnectionError, which the runners
re-send and translate() maps to ConnectionLostError when they persist.
"""

from __future__ import annotations

import asyncio
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote, urlsplit

import redis
import redis.asyncio
from redis import exceptions as rx
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.crc import key_slot
from redis.retry import Retry

from conveyor.errors import ConfigurationError, ConnectionLostError

SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}

# Replies by which a cluster refuses a command without applying it.
REDIRECTS = (rx.MovedError, rx.AskError, rx.TryAgainError, rx.ClusterDownError)


class SlotRedirect(rx.ConnectionError):
    """The server refused the command without applying it (a cluster's MOVED,
    ASK, TRYAGAIN, CLUSTERDOWN; a demoted master's READONLY): the route is
    updated, and the connection dropped."""


class Route(ABC):
    """Where a queue's connections go, asked of the deployment and cached:
    a cluster's slot master (SlotRoute) or a Sentinel service's master
    (client/sentinel.py). Shared by threads and the event loop."""

    refusals: tuple[type[rx.RedisError], ...] = ()  # replies that mean "not here"
    check_role = False  # ask ROLE on every new connection: must be a master

    @property
    @abstractmethod
    def node_url(self) -> str:
        """A plain URL with the deployment's credentials and options, for the pool."""

    @property
    @abstractmethod
    def cached(self) -> tuple[str, int] | None:
        """The address known now, if any (no I/O)."""

    @abstractmethod
    def address(self) -> tuple[str, int]:
        """(host, port) to connect to; asks the deployment when unknown."""

    @abstractmethod
    def forget(self) -> None:
        """The next connection asks the deployment again."""

    @abstractmethod
    def redirected(self, error: rx.RedisError) -> SlotRedirect:
        """Learn from a refusal; the error to raise (or return in place)."""

    @abstractmethod
    def url_for(self, host: str, port: int) -> str:
        """The plain URL of one server, with the deployment's credentials."""

    def role_refused(self, role: Any, where: str) -> SlotRedirect | None:
        """None when a ROLE reply says master; else the route is forgotten and
        the error to raise (the connection is not used)."""
        name = role[0] if isinstance(role, list) and role else role
        if _text(name) == "master":
            return None
        self.forget()
        return SlotRedirect(f"{where} is not a master now (ROLE {_text(name)}): a failover")


def is_cluster_url(url: str) -> bool:
    return url.split("://", 1)[0].lower() in SCHEMES


def parse_cluster_url(url: str) -> tuple[str, list[tuple[str, int]]]:
    """(a template node URL with HOST:PORT to fill in, the seed addresses)."""
    parts = urlsplit(url)
    scheme = SCHEMES[parts.scheme.lower()]
    userinfo, _, hosts = parts.netloc.rpartition("@")
    seeds = []
    for item in hosts.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ConfigurationError(
                f"a cluster URL lists host:port seed nodes, comma-separated: got {item!r}"
            )
        seeds.append((host.strip("[]"), int(port)))
    if parts.path.strip("/") not in ("", "0"):
        raise ConfigurationError("Redis Cluster has database 0 only: drop the /db from the URL")
    auth = f"{userinfo}@" if userinfo else ""
    query = f"?{parts.query}" if parts.query else ""
    return f"{scheme}://{auth}{{address}}/0{query}", seeds


class SlotRoute(Route):
    """Where one slot is served: cached, re-discovered when told it moved.
    Shared by threads (the heartbeat) and the event loop: a lock guards it."""

    refusals = REDIRECTS

    def __init__(self, url: str, slot: int, *, connect_timeout: float = 5.0) -> None:
        self.template, self.seeds = parse_cluster_url(url)
        self.slot = slot
        self.connect_timeout = connect_timeout
        self._address: tuple[str, int] | None = None
        self._masters: list[tuple[str, int]] = []  # every node seen: more seeds
        self._lock = threading.Lock()

    @classmethod
    def for_tag(cls, url: str, base_key: str) -> SlotRoute:
        """The route of the queue whose keys start with `base_key`."""
        return cls(url, key_slot(base_key.encode()))

    def url_for(self, host: str, port: int) -> str:
        """The plain redis:// URL of one node, with the cluster URL's credentials."""
        return self.template.format(address=f"{quote(host)}:{port}")

    @property
    def node_url(self) -> str:
        """The plain URL of some node: credentials and options, for the pool."""
        return self.url_for(*self.seeds[0])

    @property
    def cached(self) -> tuple[str, int] | None:
        return self._address

    def address(self) -> tuple[str, int]:
        """(host, port) of the slot's master; asks the cluster when unknown."""
        with self._lock:
            if self._address is None:
                self._address = self._discover()
            return self._address

    def forget(self) -> None:
        with self._lock:
            self._address = None

    def redirected(self, error: rx.RedisError) -> SlotRedirect:
        """Learn from a refusal; the error to raise (or return in place)."""
        message = str(error)
        if isinstance(error, rx.MovedError):
            parts = message.split()  # "<slot> <host>:<port>", redis-py strips "MOVED"
            host, _, port = parts[-1].rpartition(":")
            with self._lock:
                if parts[0] == str(self.slot) and host and port.isdigit():
                    self._address = (host, int(port))
                else:
                    self._address = None
        elif isinstance(error, rx.ClusterDownError):
            self.forget()
        kind = type(error).__name__.removesuffix("Error").upper()
        return SlotRedirect(
            f"Redis Cluster refused the command ({kind} {message}); nothing was applied"
        )

    def _discover(self) -> tuple[str, int]:
        errors = []
        for host, port in dict.fromkeys([*self._masters, *self.seeds]):
            client = redis.Redis.from_url(
                self.url_for(host, port),
                socket_connect_timeout=self.connect_timeout,
                socket_timeout=self.connect_timeout,
                retry=Retry(NoBackoff(), 0),  # a dead seed: on to the next one at once
            )
            try:
                ranges = client.execute_command("CLUSTER", "SLOTS")  # type: ignore[no-untyped-call]
            except rx.RedisError as exc:
                errors.append(f"{host}:{port}: {exc}")
                continue
            finally:
                client.close()
            found = self._owner(ranges, host)
            if found is not None:
                return found
            errors.append(f"{host}:{port}: no master serves slot {self.slot}")
        raise ConnectionLostError(
            f"no node of the Redis Cluster says who serves slot {self.slot}: {'; '.join(errors)}"
        )

    def _owner(self, ranges: Sequence[Any], asked: str) -> tuple[str, int] | None:
        """The slot's master in a CLUSTER SLOTS reply; every node it names
        (replicas too: one may be promoted) is remembered as a seed."""
        nodes, owner = [], None
        for start, end, *servers in ranges:
            addresses = [(_text(s[0]) or asked, int(s[1])) for s in servers]  # "": the node asked
            nodes += addresses
            if int(start) <= self.slot <= int(end):
                owner = addresses[0]
        self._masters = list(dict.fromkeys(nodes))
        return owner


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _Routed:
    """Mixed into redis-py's connection classes: connect to the route's
    address (a master, checked by ROLE when the route asks), and turn a
    refusal (MOVED, READONLY ...) into SlotRedirect."""

    route: Route
    host: str
    port: int

    def __init__(self, *args: Any, route: Route, **kwargs: Any) -> None:
        self.route = route
        super().__init__(*args, **kwargs)

    def _connect(self) -> Any:
        self.host, self.port = self.route.address()
        try:
            return super()._connect()  # type: ignore[misc]
        except OSError:
            self.route.forget()  # a failover: ask the cluster again next time
            raise

    def on_connect(self) -> None:
        super().on_connect()  # type: ignore[misc]
        if self.route.check_role:
            self.send_command("ROLE")  # type: ignore[attr-defined]
            refused = self.route.role_refused(self.read_response(), f"{self.host}:{self.port}")
            if refused is not None:
                self.disconnect()  # type: ignore[attr-defined]
                raise refused

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)  # type: ignore[misc]
        except self.route.refusals as exc:
            self.disconnect()  # type: ignore[attr-defined]
            raise self.route.redirected(exc) from exc


class _AsyncRouted:
    """The asyncio twin of _Routed (discovery blocks: it runs in a thread)."""

    route: Route
    host: str
    port: int

    def __init__(self, *args: Any, route: Route, **kwargs: Any) -> None:
        self.route = route
        super().__init__(*args, **kwargs)

    async def _connect(self) -> Any:
        address = self.route.cached
        if address is None:
            address = await asyncio.to_thread(self.route.address)
        self.host, self.port = address
        try:
            return await super()._connect()  # type: ignore[misc]
        except OSError:
            self.route.forget()
            raise

    async def on_connect(self) -> None:
        await super().on_connect()  # type: ignore[misc]
        if self.route.check_role:
            await self.send_command("ROLE")  # type: ignore[attr-defined]
            reply = await self.read_response()
            refused = self.route.role_refused(reply, f"{self.host}:{self.port}")
            if refused is not None:
                await self.disconnect()  # type: ignore[attr-defined]
                raise refused

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)  # type: ignore[misc]
        except self.route.refusals as exc:
            await self.disconnect()  # type: ignore[attr-defined]
            raise self.route.redirected(exc) from exc


class RoutedConnection(_Routed, redis.Connection):
    pass


class RoutedSSLConnection(_Routed, redis.SSLConnection):
    pass


class AsyncRoutedConnection(_AsyncRouted, redis.asyncio.Connection):
    pass


class AsyncRoutedSSLConnection(_AsyncRouted, redis.asyncio.SSLConnection):
    pass


def _retry() -> Retry:
    """redis-py re-sends a refused command (a SlotRedirect is a ConnectionError)
    over a new connection to the slot's master: a few times, with backoff,
    as its own clients do after a lost connection."""
    return Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), 6)


def sync_pool(route: Route, options: dict[str, Any]) -> redis.ConnectionPool:
    tls = route.node_url.startswith("rediss://")
    return redis.ConnectionPool.from_url(
        route.node_url,
        connection_class=RoutedSSLConnection if tls else RoutedConnection,
        route=route,
        retry=_retry(),
        **options,
    )


def async_pool(route: Route, options: dict[str, Any]) -> redis.asyncio.ConnectionPool:
    tls = route.node_url.startswith("rediss://")
    return redis.asyncio.ConnectionPool.from_url(
        route.node_url,
        connection_class=AsyncRoutedSSLConnection if tls else AsyncRoutedConnection,
        route=route,
        retry=AsyncRetry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), 6),
        **options,
    )

"""Where and how the lean wire connects: read from a redis:// or unix://
URL, and, behind a route, the node the deployment names: a cluster's
slot master or a Sentinel service's master."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.connection import parse_url

from conveyor.client.cluster import Route
from conveyor.errors import ConfigurationError

Command = Sequence[Any]


def no_such_database(url: str, db: int, reply: Exception) -> ConfigurationError:
    """SELECT refused at connect: the URL's database number is not one of the server's."""
    return ConfigurationError(
        f"Redis URL {url!r}: the server has no database {db} ({reply}). A server has "
        "databases 0 to `databases` - 1 (16 unless its config says otherwise)"
    )


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where and how to connect, read from a redis:// or unix:// URL."""

    host: str | None
    port: int
    path: str | None
    db: int
    username: str | None
    password: str | None
    connect_timeout: float
    socket_timeout: float | None
    route: Route | None = None  # a cluster or Sentinel: host and port come from it

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        connect_timeout: float,
        socket_timeout: float | None,
        route: Route | None = None,
    ) -> Endpoint | None:
        """None when the URL needs more than this wire offers (TLS, say)."""
        if route is not None:
            url = route.node_url
        if not url.startswith(("redis://", "unix://")):
            return None
        try:
            parts = parse_url(url)  # type: ignore[no-untyped-call]
        except ValueError:
            return None
        return cls(
            host=parts.get("host", "localhost") if "path" not in parts else None,
            port=int(parts.get("port", 6379)),
            path=parts.get("path"),
            db=int(parts.get("db", 0) or 0),
            username=parts.get("username"),
            password=parts.get("password"),
            connect_timeout=connect_timeout,
            socket_timeout=socket_timeout,
            route=route,
        )

    def address(self) -> tuple[str, int]:
        """(host, port) to connect to now: a cluster's is the slot's master."""
        if self.route is not None:
            return self.route.address()
        return self.host or "localhost", self.port

    @property
    def shown_url(self) -> str:
        """This endpoint as a URL, without credentials."""
        if self.path is not None:
            return f"unix://{self.path}?db={self.db}"
        host, port = self.address()
        return f"redis://{host}:{port}/{self.db}"

    def handshake(self) -> list[Command]:
        """AUTH and SELECT when needed, then always a PING: a port that is not
        plaintext Redis (TLS, say) fails here, before any real command."""
        commands: list[Command] = []
        if self.password is not None:
            auth = [self.username, self.password] if self.username else [self.password]
            commands.append(("AUTH", *auth))
        if self.db:
            commands.append(("SELECT", self.db))
        if self.route is not None and self.route.check_role:
            commands.append(("ROLE",))
        commands.append(("PING",))
        return commands

    def refused(self, replies: list[Any], where: str) -> Exception | None:
        """The error a handshake's replies (all but the PING's) end in, if any:
        a refusal (AUTH, SELECT), or a ROLE that is not the master the route wants."""
        for command, reply in zip(self.handshake()[:-1], replies, strict=False):
            if isinstance(reply, Exception):
                if command[0] == "SELECT":
                    return no_such_database(self.shown_url, self.db, reply)
                return reply
            if command[0] == "ROLE" and self.route is not None:
                return self.route.role_refused(reply, where)
        return None

    def follow(self, replies: list[Any]) -> bool:
        """Turn a refusal (a cluster's MOVED, a demoted master's READONLY)
        into SlotRedirect (the route learns); True when the connection must
        be dropped."""
        if self.route is None:
            return False
        moved = False
        for i, reply in enumerate(replies):
            if isinstance(reply, self.route.refusals):
                replies[i] = self.route.redirected(reply)
                moved = True
        return moved

"""Redis Sentinel: connect to the master of a monitored service, and follow
its failovers.

A `redis+sentinel://[user:pass@]host:port[,host:port...]/<service>[/db]` URL
(`rediss+sentinel://` for TLS) names sentinels and a service. A
`SentinelRoute` asks the sentinels, in turn, for the service's master
(`SENTINEL get-master-addr-by-name`), and every connection (redis-py's and
the lean wire's) goes there, checked by `ROLE` as it opens: a server that
is not a master is refused, the route forgotten. The address is cached; a
connection that cannot be made, a READONLY reply (the master was demoted)
or a ROLE that is not master forgets it, so the next connection asks the
sentinels again. A READONLY command was not applied: it is re-sent, as a
cluster's MOVED is (client/cluster.py has the machinery both share).

The URL's credentials and options are the master's; the sentinels are asked
with the same TLS options but no credentials (sentinels are usually
unauthenticated; `requirepass` on them is not supported yet).
"""

from __future__ import annotations

import threading
from urllib.parse import quote, unquote, urlsplit

import redis
from redis import exceptions as rx
from redis.backoff import NoBackoff
from redis.retry import Retry

from conveyor.client.cluster import Route, SlotRedirect
from conveyor.errors import ConfigurationError, ConnectionLostError

SCHEMES = {"redis+sentinel": "redis", "rediss+sentinel": "rediss"}


def is_sentinel_url(url: str) -> bool:
    return url.split("://", 1)[0].lower() in SCHEMES


def parse_sentinel_url(url: str) -> tuple[str, list[tuple[str, int]], str, str]:
    """(a template master URL with {address} to fill in, the sentinels'
    addresses, the service name, a template URL for asking a sentinel)."""
    parts = urlsplit(url)
    scheme = SCHEMES[parts.scheme.lower()]
    userinfo, _, hosts = parts.netloc.rpartition("@")
    sentinels = []
    for item in hosts.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ConfigurationError(
                "a Sentinel URL lists the sentinels as host:port, comma-separated "
                f"(redis+sentinel://host:26379,host:26380/<service>[/db]): got {item!r}"
            )
        sentinels.append((host.strip("[]"), int(port)))
    path = [unquote(p) for p in parts.path.split("/") if p]
    if not path or len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise ConfigurationError(
            "a Sentinel URL ends with the service name and an optional database: "
            f"redis+sentinel://host:26379/<service>[/db], got path {parts.path!r}"
        )
    service, db = path[0], path[1] if len(path) == 2 else "0"
    auth = f"{userinfo}@" if userinfo else ""
    query = f"?{parts.query}" if parts.query else ""
    master = f"{scheme}://{auth}{{address}}/{db}{query}"
    return master, sentinels, service, f"{scheme}://{{address}}/0{query}"


class SentinelRoute(Route):
    """Where a Sentinel service's master is: cached, forgotten on a failover."""

    refusals = (rx.ReadOnlyError,)
    check_role = True

    def __init__(self, url: str, *, connect_timeout: float = 5.0) -> None:
        self.template, self.sentinels, self.service, self._ask = parse_sentinel_url(url)
        self.connect_timeout = connect_timeout
        self._address: tuple[str, int] | None = None
        self._lock = threading.Lock()

    def url_for(self, host: str, port: int) -> str:
        return self.template.format(address=f"{quote(host)}:{port}")

    @property
    def node_url(self) -> str:
        return self.url_for(*self.sentinels[0])

    @property
    def cached(self) -> tuple[str, int] | None:
        return self._address

    def address(self) -> tuple[str, int]:
        """(host, port) of the service's master; asks the sentinels when unknown."""
        with self._lock:
            if self._address is None:
                self._address = self._discover()
            return self._address

    def forget(self) -> None:
        with self._lock:
            self._address = None

    def redirected(self, error: rx.RedisError) -> SlotRedirect:
        self.forget()
        return SlotRedirect(
            f"the server is no master of {self.service!r} now ({error}); nothing was applied"
        )

    def _discover(self) -> tuple[str, int]:
        """Ask each sentinel in turn; the one that answers moves to the front
        (the Sentinel client protocol's advice)."""
        errors, unknown = [], 0
        for i, (host, port) in enumerate(self.sentinels):
            client = redis.Redis.from_url(
                self._ask.format(address=f"{quote(host)}:{port}"),
                socket_connect_timeout=self.connect_timeout,
                socket_timeout=self.connect_timeout,
                retry=Retry(NoBackoff(), 0),  # a dead sentinel: on to the next one at once
            )
            try:
                reply = client.execute_command(  # type: ignore[no-untyped-call]
                    "SENTINEL", "get-master-addr-by-name", self.service
                )
            except rx.RedisError as exc:
                errors.append(f"{host}:{port}: {exc}")
                continue
            finally:
                client.close()
            if not reply:
                unknown += 1
                errors.append(f"{host}:{port}: does not monitor {self.service!r}")
                continue
            self.sentinels.insert(0, self.sentinels.pop(i))
            return _text(reply[0]), int(reply[1])
        message = f"no sentinel gave the master of {self.service!r}: {'; '.join(errors)}"
        if unknown == len(self.sentinels):
            raise ConfigurationError(message + " (is the service name right?)")
        raise ConnectionLostError(message)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

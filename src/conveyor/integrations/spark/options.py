"""Data source options: parsed once, on the driver, into typed frozen records.

Spark hands a data source its options as a case-insensitive mapping of strings (the keys
arrive lower-cased). Every source reads the options it knows through :class:`Options` and
then calls :meth:`Options.finish`, so a misspelt option is an error, not a silent default.

The connection option is called ``url`` on purpose: Spark redacts option values whose key
matches ``spark.sql.redaction.options.regex`` (default ``(?i)url``), so a password in the URL
stays out of query plans and the UI.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import redis

from conveyor.client.cluster import sync_pool
from conveyor.client.connection import resolve_url, slot_route
from conveyor.client.core import QueueCore
from conveyor.client.models import QueueSettings
from conveyor.errors import ConfigurationError, UnknownOptionError
from conveyor.options import check_name
from conveyor.protocol.keys import QueueKeys

__all__ = ["Options", "Target", "parse_instant_ms"]


class Options:
    """Typed access to a data source's string options; tracks which were read."""

    def __init__(self, raw: Mapping[str, str], *, source: str) -> None:
        self._raw = {str(k).lower(): str(v) for k, v in dict(raw).items()}
        self._seen: set[str] = set()
        self._source = source

    def text(self, name: str, default: str | None = None) -> str | None:
        key = name.lower()
        self._seen.add(key)
        value = self._raw.get(key)
        return default if value is None or value == "" else value

    def integer(self, name: str, default: int, *, minimum: int = 0) -> int:
        value = self.text(name)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise self._bad(name, value, f"an integer >= {minimum}") from None
        if number < minimum:
            raise self._bad(name, value, f"an integer >= {minimum}")
        return number

    def flag(self, name: str, default: bool) -> bool:
        value = self.text(name)
        if value is None:
            return default
        if value.lower() in ("true", "1", "yes"):
            return True
        if value.lower() in ("false", "0", "no"):
            return False
        raise self._bad(name, value, "true or false")

    def choice(self, name: str, default: str, allowed: Iterable[str]) -> str:
        value = (self.text(name) or default).lower()
        if value not in allowed:
            raise self._bad(name, value, " | ".join(sorted(allowed)))
        return value

    def instant_ms(self, name: str) -> int | None:
        value = self.text(name)
        if value is None:
            return None
        try:
            return parse_instant_ms(value)
        except ValueError:
            raise self._bad(name, value, "an ISO-8601 time or epoch seconds") from None

    def names(self, name: str) -> tuple[str, ...] | None:
        value = self.text(name)
        if value is None:
            return None
        return tuple(part.strip() for part in value.split(",") if part.strip())

    def finish(self, *, ignore: Iterable[str] = ()) -> None:
        """Raise on options nobody read (after every reader of this source ran)."""
        unknown = set(self._raw) - self._seen - {i.lower() for i in ignore}
        if unknown:
            raise UnknownOptionError(
                f"unknown option(s) for format {self._source!r}: {sorted(unknown)} "
                "(see docs/spark.md for the options of each format)"
            )

    def _bad(self, name: str, value: str, expected: str) -> ConfigurationError:
        return ConfigurationError(f"option {name}={value!r}: expected {expected}")


def parse_instant_ms(value: str) -> int:
    """Epoch milliseconds from epoch seconds or ISO-8601 (naive means UTC)."""
    try:
        return round(float(value) * 1000)
    except ValueError:
        pass
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return round(moment.timestamp() * 1000)


@dataclass(frozen=True, slots=True)
class Target:
    """Which queue on which Redis. Holds only strings and numbers: it is pickled to every
    Spark task, and each task opens its own connection from it (never a pickled client)."""

    url: str
    queue: str
    prefix: str
    events_maxlen: int

    @classmethod
    def from_options(cls, options: Options) -> Target:
        queue = options.text("queue")
        if queue is None:
            raise ConfigurationError("option 'queue' is required (the Conveyor queue name)")
        defaults = QueueSettings()
        target = cls(
            url=resolve_url(options.text("url")),
            queue=queue,
            prefix=options.text("prefix", defaults.prefix) or defaults.prefix,
            events_maxlen=options.integer("eventsMaxlen", defaults.events_maxlen, minimum=1),
        )
        target.keys()  # validates the queue name and prefix now, on the driver
        return target

    def settings(self) -> QueueSettings:
        return QueueSettings(prefix=self.prefix, events_maxlen=self.events_maxlen)

    def core(self) -> QueueCore:
        return QueueCore(self.queue, self.settings())

    def keys(self) -> QueueKeys:
        """The queue's key names (validated), without loading the scripts."""
        return QueueKeys(
            check_name(self.prefix, "key prefix"), check_name(self.queue, "queue name")
        )

    def client(self) -> redis.Redis:
        """A new connection. Reads of a million rows take longer than redis-py 8's 5 s
        default socket timeout allows for one slow reply on a busy server.

        A `redis+cluster://` URL connects to the master that serves the queue's slot (every
        key of a queue is in that slot), and follows it when the slot moves, as the
        client's own connections do; a `redis+sentinel://` URL, to the service's master."""
        timeouts = {"socket_connect_timeout": 10, "socket_timeout": 120}
        route = slot_route(self.url, self.keys())
        if route is not None:
            return redis.Redis(connection_pool=sync_pool(route, timeouts))
        return redis.Redis.from_url(self.url, **timeouts)

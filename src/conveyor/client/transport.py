"""Running Calls on Redis: EVALSHA with a NOSCRIPT reload, pipelines, and
the translation of redis-py errors into Conveyor's tree.

The sync and async runners mirror each other line for line; keep them so.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

import hiredis
import redis
import redis.asyncio
from redis import exceptions as rx

from conveyor.client.cluster import Route, SlotRedirect, async_pool, sync_pool
from conveyor.client.connection import connection_options
from conveyor.client.endpoint import no_such_database
from conveyor.client.replicas import ReplicaWait
from conveyor.client.wire import (
    AsyncWire,
    HandshakeError,
    SyncWire,
    handshake_answered,
    handshake_error,
)
from conveyor.errors import (
    ConfigurationError,
    ConnectionLostError,
    ConveyorError,
    OutOfMemoryError,
    UncertainWriteError,
    UnreplicatedWriteError,
    ValidationError,
)
from conveyor.protocol.ops import Call
from conveyor.protocol.scripts import Script

log = logging.getLogger("conveyor")


def translate(exc: Exception) -> ConveyorError | None:
    """The Conveyor error for a redis-py error, or None to re-raise it as is."""
    if isinstance(exc, HandshakeError | SlotRedirect):  # nothing was applied
        return ConnectionLostError(str(exc))
    if isinstance(exc, rx.MovedError | rx.AskError):  # a plain URL to a cluster node
        return ConfigurationError(
            f"this Redis is a Cluster node that does not serve the queue's slot ({exc}): "
            "connect with a redis+cluster://host:port URL"
        )
    if isinstance(exc, rx.TryAgainError | rx.ClusterDownError):
        return ConnectionLostError(f"Redis Cluster refused the command, nothing applied: {exc}")
    if isinstance(exc, rx.AuthenticationError | rx.AuthorizationError):
        return ConfigurationError(f"Redis refused the credentials: {exc}")
    if isinstance(exc, rx.OutOfMemoryError) or "OOM command not allowed" in str(exc):
        return OutOfMemoryError(f"Redis is out of memory (maxmemory reached): {exc}")
    if isinstance(exc, rx.ResponseError) and str(exc).startswith("invalid call"):
        return ValidationError(f"the script refused the call, nothing was written: {exc}")
    if isinstance(exc, rx.NoPermissionError) or "NOPERM" in str(exc):
        return ConfigurationError(f"the Redis user lacks a permission: {exc}")
    if _pool_exhausted(exc):
        return ConnectionLostError(
            f"{exc}: every connection of the client's pool is in use (nothing was sent); "
            "raise QueueSettings(max_connections=...) or run fewer calls at once"
        )
    if isinstance(exc, rx.ConnectionError | rx.TimeoutError):
        message = str(exc)
        if "connecting" in message or "refused" in message.lower():
            return ConnectionLostError(f"cannot reach Redis: {message}")
        return UncertainWriteError(f"lost the connection to Redis mid-command: {message}")
    return None


def _pool_exhausted(exc: Exception) -> bool:
    """redis-py's pool refused to open one more connection: raised before
    anything is written (a MaxConnectionsError on redis-py 6+)."""
    return isinstance(exc, rx.ConnectionError) and str(exc) == "Too many connections"


# a reply, not a broken handshake: credentials refused, or not the master (SlotRedirect)
_REFUSED = (rx.AuthenticationError, rx.AuthorizationError, HandshakeError, SlotRedirect)


_TLS = (redis.connection.SSLConnection, redis.asyncio.connection.SSLConnection)


def _select_refused(connection: Any, exc: rx.ResponseError) -> bool:
    """The refusal is the SELECT's (out of range, or a cluster node), not an odd AUTH reply."""
    text = str(exc)
    return bool(connection.db) and ("DB index" in text or "SELECT" in text)


def _database_refused(connection: Any, exc: rx.ResponseError) -> ConfigurationError:
    """redis-py's handshake failed at its SELECT: the URL's database number is not the
    server's. The caller drops the half-made connection, which would otherwise serve
    database 0 on its next use."""
    if getattr(connection, "path", None):
        url = f"unix://{connection.path}?db={connection.db}"
    else:
        scheme = "rediss" if isinstance(connection, _TLS) else "redis"
        url = f"{scheme}://{connection.host}:{connection.port}/{connection.db}"
    return no_such_database(url, connection.db, exc)


def _handshake(connection: Any) -> None:
    """redis-py's handshake, then a PING: a port that does not speak
    plaintext Redis (TLS, say) fails here, as a connection error."""
    try:
        try:
            connection.on_connect()
        except rx.ResponseError as exc:
            if not _select_refused(connection, exc):
                raise  # as any refusal before: the handshake goes on without its PING
            connection.disconnect()
            raise _database_refused(connection, exc) from None
        connection.send_command("PING")
        connection.read_response()
    except rx.ResponseError:  # a refused PING is still a Redis reply
        pass
    except _REFUSED:
        raise
    except (rx.ConnectionError, rx.TimeoutError, rx.InvalidResponse) as exc:
        # InvalidResponse: the port answered, but not in RESP (not Redis)
        raise handshake_error(connection._host_error(), exc) from exc
    handshake_answered(connection._host_error())


async def _handshake_async(connection: Any) -> None:
    try:
        try:
            await connection.on_connect()
        except rx.ResponseError as exc:
            if not _select_refused(connection, exc):
                raise  # as any refusal before: the handshake goes on without its PING
            await connection.disconnect()
            raise _database_refused(connection, exc) from None
        await connection.send_command("PING")
        await connection.read_response()
    except rx.ResponseError:
        pass
    except _REFUSED:
        raise
    except (rx.ConnectionError, rx.TimeoutError, rx.InvalidResponse) as exc:
        raise handshake_error(connection._host_error(), exc) from exc
    handshake_answered(connection._host_error())


def sync_client(url: str, route: Route | None = None, **overrides: Any) -> redis.Redis:
    """A redis-py client for `url` (bytes replies); on a cluster, for the
    master that serves `route`'s slot."""
    options = connection_options(url, redis_connect_func=_handshake, **overrides)
    if route is None:
        return redis.Redis.from_url(url, **options)
    return redis.Redis.from_pool(sync_pool(route, options))


def async_client(url: str, route: Route | None = None, **overrides: Any) -> redis.asyncio.Redis:
    """The asyncio twin of sync_client."""
    options = connection_options(url, redis_connect_func=_handshake_async, **overrides)
    if route is None:
        return redis.asyncio.Redis.from_url(url, **options)
    return redis.asyncio.Redis.from_pool(async_pool(route, options))


class _Translated:
    """Re-raises a redis-py error as Conveyor's (a class, not @contextmanager:
    it wraps every call, and a generator costs a few µs more per use)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _: Any) -> None:
        if isinstance(exc, rx.RedisError):
            mapped = translate(exc)
            if mapped is not None:
                raise mapped from exc


_TRANSLATED = _Translated()


def translated() -> _Translated:
    return _TRANSLATED


def _argv(call: Call, script: Script) -> tuple[Any, ...]:
    return (script.sha, len(call.keys), *call.keys, *call.args)


def _packed(call: Call, script: Script) -> bytes:
    command: tuple[Any, ...] = ("EVALSHA", script.sha, len(call.keys), *call.keys, *call.args)
    packed: bytes = hiredis.pack_command(command)
    return packed


def _no_script(result: Any) -> bool:
    return isinstance(result, rx.NoScriptError)


# Calls refused unapplied are sent again: after NOSCRIPT (the script is
# loaded first) or a cluster's refusal (after a pause: a failover or a slot
# migration takes a moment; the route already knows where a MOVED slot went).
RESEND_PAUSES = (0.0, 0.05, 0.2, 0.5, 1.0, 2.0)


def _refused(calls: Sequence[Call], results: Sequence[Any]) -> tuple[list[int], bool, set[str]]:
    """What the runners' _settle re-sends: the indexes refused unapplied, whether a
    cluster redirected any (worth a pause), and the scripts to load first."""
    again = [i for i, r in enumerate(results) if isinstance(r, rx.NoScriptError | SlotRedirect)]
    redirected = any(isinstance(results[i], SlotRedirect) for i in again)
    return again, redirected, {calls[i].script for i in again if _no_script(results[i])}


def _merged(results: list[Any], again: list[int], resent: Sequence[Any]) -> None:
    for i, result in zip(again, resent, strict=True):
        results[i] = result


def raised(results: list[Any]) -> list[Any]:
    """The results, unless one is an error: then the first error is raised."""
    for result in results:
        if isinstance(result, Exception):
            raise result
    return results


def _route_of(client: redis.Redis | redis.asyncio.Redis) -> Route | None:
    """The route a client's connections follow (cluster.sync_pool, async_pool)."""
    route = client.connection_pool.connection_kwargs.get("route")
    return route if isinstance(route, Route) else None


class SyncRunner:
    """Runs scripts over the lean wire when there is one, else redis-py."""

    def __init__(
        self,
        client: redis.Redis,
        scripts: dict[str, Script],
        wire: SyncWire | None = None,
        replicas: ReplicaWait | None = None,
    ) -> None:
        self.client = client
        self.scripts = scripts
        self.wire = wire
        self.replicas = replicas  # min_replicas: acknowledged calls WAIT for them

    def run(self, call: Call) -> Any:
        if self.replicas is not None and self.replicas.wanted([call]):
            return self.run_many([call])[0]  # WAIT in the same pipeline
        if self.wire is not None:
            return self.run_packed(call, _packed(call, self.scripts[call.script]))
        script = self.scripts[call.script]
        with translated():
            try:
                return self.client.execute_command("EVALSHA", *_argv(call, script))  # type: ignore[no-untyped-call]
            except rx.NoScriptError:
                self.client.script_load(script.source)
                return self.client.execute_command("EVALSHA", *_argv(call, script))  # type: ignore[no-untyped-call]

    def run_packed(self, call: Call, packed: bytes) -> Any:
        """run(call), its EVALSHA already packed: one round trip without a
        pipeline's bookkeeping. An error reply is settled as run_many's are
        (a refusal re-sent, any other raised)."""
        if self.replicas is not None and self.replicas.wanted([call]):
            return self.run_many([call])[0]  # WAIT in the same pipeline
        if self.wire is None:
            return self.run(call)
        with translated():
            result = self.wire.call_packed(packed)
            if not isinstance(result, Exception):
                return result
            return self._settle([call], [result])[0]

    def run_many(self, calls: Sequence[Call]) -> list[Any]:
        """Pipelined, not transactional; scripts missing on the server are
        loaded, and only the calls refused unapplied (NOSCRIPT, a cluster's
        MOVED / TRYAGAIN / CLUSTERDOWN) are re-sent, a bounded number of times."""
        with translated():
            return self._settle(calls, self._pipeline(calls))

    def _settle(self, calls: Sequence[Call], results: list[Any]) -> list[Any]:
        """The results of `calls` once those refused unapplied are re-sent."""
        for pause in RESEND_PAUSES:
            again, redirected, missing = _refused(calls, results)
            if not again:
                break
            if redirected:
                time.sleep(pause)
            for name in missing:
                self._load(self.scripts[name])
            _merged(results, again, self._pipeline([calls[i] for i in again]))
        return raised(results)

    def _load(self, script: Script) -> None:
        if self.wire is not None:
            self.wire.call("SCRIPT", "LOAD", script.source)
        else:
            self.client.script_load(script.source)

    def _pipeline(self, calls: Sequence[Call]) -> list[Any]:
        commands = [("EVALSHA", *_argv(c, self.scripts[c.script])) for c in calls]
        wait = self.replicas if self.replicas is not None and self.replicas.wanted(calls) else None
        if wait is not None:
            commands.append(wait.command)
        if self.wire is not None:
            replies = self.wire.call_many(commands)
        else:
            pipe = self.client.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)  # type: ignore[no-untyped-call]
            replies = list(pipe.execute(raise_on_error=False))
        if wait is None:
            return replies
        try:
            return wait.checked(calls, replies)
        except UnreplicatedWriteError:
            self._reroute()
            raise

    def _reroute(self) -> None:
        """Too few replicas have our writes: this master may have been failed
        over without knowing it yet. Behind a route (Sentinel), the next
        connection asks the deployment again, as a re-send's will."""
        route = _route_of(self.client)
        if route is None:
            return
        route.forget()
        if self.wire is not None:
            self.wire.close()
        self.client.connection_pool.disconnect(inuse_connections=False)


class AsyncRunner:
    """The asyncio twin of SyncRunner."""

    def __init__(
        self,
        client: redis.asyncio.Redis,
        scripts: dict[str, Script],
        wire: AsyncWire | None = None,
        replicas: ReplicaWait | None = None,
    ) -> None:
        self.client = client
        self.scripts = scripts
        self.wire = wire
        self.replicas = replicas

    async def run(self, call: Call) -> Any:
        if self.replicas is not None and self.replicas.wanted([call]):
            return (await self.run_many([call]))[0]  # WAIT in the same pipeline
        if self.wire is not None:
            return await self.run_packed(call, _packed(call, self.scripts[call.script]))
        script = self.scripts[call.script]
        with translated():
            try:
                return await self.client.execute_command("EVALSHA", *_argv(call, script))  # type: ignore[no-untyped-call]
            except rx.NoScriptError:
                await self.client.script_load(script.source)
                return await self.client.execute_command("EVALSHA", *_argv(call, script))  # type: ignore[no-untyped-call]

    async def run_packed(self, call: Call, packed: bytes) -> Any:
        if self.replicas is not None and self.replicas.wanted([call]):
            return (await self.run_many([call]))[0]  # WAIT in the same pipeline
        if self.wire is None:
            return await self.run(call)
        with translated():
            result = await self.wire.call_packed(packed)
            if not isinstance(result, Exception):
                return result
            return (await self._settle([call], [result]))[0]

    async def run_many(self, calls: Sequence[Call]) -> list[Any]:
        with translated():
            return raised(await self.run_many_settled(calls))

    async def run_many_settled(self, calls: Sequence[Call]) -> list[Any]:
        """run_many with each call's error in its place, not raised (a reply
        error; a lost connection still raises)."""
        with translated():
            return await self._settled(calls, await self._pipeline(calls))

    async def _settle(self, calls: Sequence[Call], results: list[Any]) -> list[Any]:
        return raised(await self._settled(calls, results))

    async def _settled(self, calls: Sequence[Call], results: list[Any]) -> list[Any]:
        for pause in RESEND_PAUSES:
            again, redirected, missing = _refused(calls, results)
            if not again:
                break
            if redirected:
                await asyncio.sleep(pause)
            for name in missing:
                await self._load(self.scripts[name])
            _merged(results, again, await self._pipeline([calls[i] for i in again]))
        return results

    async def _load(self, script: Script) -> None:
        if self.wire is not None:
            await self.wire.call("SCRIPT", "LOAD", script.source)
        else:
            await self.client.script_load(script.source)

    async def _pipeline(self, calls: Sequence[Call]) -> list[Any]:
        commands = [("EVALSHA", *_argv(c, self.scripts[c.script])) for c in calls]
        wait = self.replicas if self.replicas is not None and self.replicas.wanted(calls) else None
        if wait is not None:
            commands.append(wait.command)
        if self.wire is not None:
            replies = await self.wire.call_many(commands)
        else:
            pipe = self.client.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            replies = list(await pipe.execute(raise_on_error=False))
        if wait is None:
            return replies
        try:
            return wait.checked(calls, replies)
        except UnreplicatedWriteError:
            await self._reroute()
            raise

    async def _reroute(self) -> None:
        route = _route_of(self.client)
        if route is None:
            return
        route.forget()
        if self.wire is not None:
            await self.wire.close()
        await self.client.connection_pool.disconnect(inuse_connections=False)

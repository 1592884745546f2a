"""Running Calls on Redis: EVALSHA with a NOSCRIPT reload, pipelines, and
the translation of redis-py errors into Conveyor's tree.

The sync and async runners mirror each other line for line; keep them so.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis
import redis.asyncio
from redis import exceptions as rx

from conveyor.client.wire import AsyncWire, SyncWire
from conveyor.errors import (
    ConfigurationError,
    ConnectionLostError,
    ConveyorError,
    OutOfMemoryError,
    UncertainWriteError,
)
from conveyor.protocol.ops import Call
from conveyor.protocol.scripts import Script

log = logging.getLogger("conveyor")


def translate(exc: Exception) -> ConveyorError | None:
    """The Conveyor error for a redis-py error, or None to re-raise it as is."""
    if isinstance(exc, rx.AuthenticationError | rx.AuthorizationError):
        return ConfigurationError(f"Redis refused the credentials: {exc}")
    if isinstance(exc, rx.OutOfMemoryError) or "OOM command not allowed" in str(exc):
        return OutOfMemoryError(f"Redis is out of memory (maxmemory reached): {exc}")
    if isinstance(exc, rx.NoPermissionError) or "NOPERM" in str(exc):
        return ConfigurationError(f"the Redis user lacks a permission: {exc}")
    if isinstance(exc, rx.ConnectionError | rx.TimeoutError):
        message = str(exc)
        if "connecting" in message or "refused" in message.lower():
            return ConnectionLostError(f"cannot reach Redis: {message}")
        return UncertainWriteError(f"lost the connection to Redis mid-command: {message}")
    return None


@contextmanager
def translated() -> Iterator[None]:
    try:
        yield
    except rx.RedisError as exc:
        mapped = translate(exc)
        if mapped is None:
            raise
        raise mapped from exc


def _argv(call: Call, script: Script) -> list[Any]:
    return [script.sha, len(call.keys), *call.keys, *call.args]


def _no_script(result: Any) -> bool:
    return isinstance(result, rx.NoScriptError)


class SyncRunner:
    """Runs scripts over the lean wire when there is one, else redis-py."""

    def __init__(
        self, client: redis.Redis, scripts: dict[str, Script], wire: SyncWire | None = None
    ) -> None:
        self.client = client
        self.scripts = scripts
        self.wire = wire

    def run(self, call: Call) -> Any:
        if self.wire is not None:
            return self.run_many([call])[0]
        script = self.scripts[call.script]
        with translated():
            try:
                return self.client.execute_command("EVALSHA", *_argv(call, script))  # type: ignore[no-untyped-call]
            except rx.NoScriptError:
                self.client.script_load(script.source)
                return self.client.execute_command("EVALSHA", *_argv(call, script))  # type: ignore[no-untyped-call]

    def run_many(self, calls: Sequence[Call]) -> list[Any]:
        """Pipelined, not transactional; scripts missing on the server are
        loaded and only the calls that hit NOSCRIPT (never ran) are re-sent."""
        with translated():
            results = self._pipeline(calls)
            missing = [i for i, r in enumerate(results) if _no_script(r)]
            if missing:
                for name in {calls[i].script for i in missing}:
                    self._load(self.scripts[name])
                again = self._pipeline([calls[i] for i in missing])
                for i, result in zip(missing, again, strict=True):
                    results[i] = result
            for result in results:
                if isinstance(result, Exception):
                    raise result
            return results

    def _load(self, script: Script) -> None:
        if self.wire is not None:
            self.wire.call("SCRIPT", "LOAD", script.source)
        else:
            self.client.script_load(script.source)

    def _pipeline(self, calls: Sequence[Call]) -> list[Any]:
        if self.wire is not None:
            return self.wire.call_many(
                [("EVALSHA", *_argv(c, self.scripts[c.script])) for c in calls]
            )
        pipe = self.client.pipeline(transaction=False)
        for call in calls:
            pipe.execute_command("EVALSHA", *_argv(call, self.scripts[call.script]))  # type: ignore[no-untyped-call]
        return list(pipe.execute(raise_on_error=False))


class AsyncRunner:
    """The asyncio twin of SyncRunner."""

    def __init__(
        self,
        client: redis.asyncio.Redis,
        scripts: dict[str, Script],
        wire: AsyncWire | None = None,
    ) -> None:
        self.client = client
        self.scripts = scripts
        self.wire = wire

    async def run(self, call: Call) -> Any:
        if self.wire is not None:
            return (await self.run_many([call]))[0]
        script = self.scripts[call.script]
        with translated():
            try:
                return await self.client.execute_command("EVALSHA", *_argv(call, script))  # type: ignore[no-untyped-call]
            except rx.NoScriptError:
                await self.client.script_load(script.source)
                return await self.client.execute_command("EVALSHA", *_argv(call, script))  # type: ignore[no-untyped-call]

    async def run_many(self, calls: Sequence[Call]) -> list[Any]:
        with translated():
            results = await self._pipeline(calls)
            missing = [i for i, r in enumerate(results) if _no_script(r)]
            if missing:
                for name in {calls[i].script for i in missing}:
                    await self._load(self.scripts[name])
                again = await self._pipeline([calls[i] for i in missing])
                for i, result in zip(missing, again, strict=True):
                    results[i] = result
            for result in results:
                if isinstance(result, Exception):
                    raise result
            return results

    async def _load(self, script: Script) -> None:
        if self.wire is not None:
            await self.wire.call("SCRIPT", "LOAD", script.source)
        else:
            await self.client.script_load(script.source)

    async def _pipeline(self, calls: Sequence[Call]) -> list[Any]:
        if self.wire is not None:
            commands = [("EVALSHA", *_argv(c, self.scripts[c.script])) for c in calls]
            return await self.wire.call_many(commands)
        pipe = self.client.pipeline(transaction=False)
        for call in calls:
            pipe.execute_command("EVALSHA", *_argv(call, self.scripts[call.script]))
        return list(await pipe.execute(raise_on_error=False))

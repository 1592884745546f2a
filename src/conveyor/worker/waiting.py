"""What a worker waits on: the blocking connection of an idle worker, and
the next tick of a repeatable job it claimed."""

from __future__ import annotations

import dataclasses
from typing import Any

from conveyor.client.aio import AsyncQueue
from conveyor.client.cluster import SlotRoute
from conveyor.client.endpoint import Endpoint
from conveyor.client.transport import async_client
from conveyor.client.wire import AsyncWire
from conveyor.protocol import ops, schedules
from conveyor.timing import next_tick


class Blocker:
    """The connection an idle worker blocks on (BZPOPMIN): its own, since a
    blocked connection can carry nothing else, with a socket timeout longer
    than the longest wait. The lean wire when the URL allows, else redis-py."""

    def __init__(
        self,
        url: str,
        endpoint: Endpoint | None,
        socket_timeout: float,
        *,
        route: SlotRoute | None = None,
    ) -> None:
        self._wire = (
            None
            if endpoint is None
            else AsyncWire(dataclasses.replace(endpoint, socket_timeout=socket_timeout))
        )
        self._client = (
            None
            if self._wire is not None
            else async_client(url, route, socket_timeout=socket_timeout)
        )

    async def bzpopmin(self, *keys_and_timeout: Any) -> Any:
        if self._wire is not None:
            return await self._wire.call("BZPOPMIN", *keys_and_timeout)
        assert self._client is not None
        *keys, timeout = keys_and_timeout
        return await self._client.bzpopmin(keys, timeout)

    async def bzpopmin_then(self, pop: tuple[Any, ...], sha: str, call: ops.Call) -> Any:
        """BZPOPMIN and the script `call` in one write (the wire only, else None);
        replies in order, error replies returned in place."""
        if self._wire is None:
            return None
        evalsha = ("EVALSHA", sha, len(call.keys), *call.keys, *call.args)
        return await self._wire.call_many([("BZPOPMIN", *pop), evalsha])

    async def close(self) -> None:
        if self._wire is not None:
            await self._wire.close()
        if self._client is not None:
            await self._client.aclose()


async def advance(queue: AsyncQueue, claimed: ops.ClaimedJob, now_ms: int) -> None:
    """A repeatable job's tick was claimed: queue the next tick's job.
    schedule_next is a compare-and-set, so racing workers add one job."""
    assert claimed.schedule is not None
    keys = queue.core.keys
    fired = int(claimed.id.rsplit("@", 1)[-1])  # tick jobs are `<schedule id>@<tick ms>`
    cron, every, tz = await queue.client.hmget(
        keys.schedule(claimed.schedule), "cron", "every", "tz"
    )
    after = now_ms
    for _ in range(10):  # a tick whose job already ran (run early) is skipped
        following = next_tick(
            cron=ops.text(cron) if cron else None,
            every_ms=int(every) if every else None,
            fired_ms=fired,
            now_ms=after,
            tz=ops.text(tz) if tz else None,
        )
        call = schedules.schedule_next(
            keys,
            claimed.schedule,
            fired_ms=fired,
            next_ms=following,
            events_maxlen=queue.core.settings.events_maxlen,
        )
        if int(await queue.runner.run(call)) != -1:
            return
        after = following

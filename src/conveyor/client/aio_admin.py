"""The operator's settings of AsyncQueue (aio.py): schedules (repeatable jobs)
and limits (queue-wide, per group, per concurrency key; paused groups).
AsyncQueue inherits it; the connection and `check` are AsyncQueue's."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import redis.asyncio

from conveyor.client.core import QueueCore
from conveyor.client.migration import Migration
from conveyor.client.models import MigrationReport, ScheduleInfo
from conveyor.client.transport import AsyncRunner, translated
from conveyor.errors import ConveyorError
from conveyor.job import JobState
from conveyor.protocol import ops, schedules


class AsyncQueueAdmin:
    """Schedules and limits of one queue; AsyncQueue provides the connection
    (`client`, `runner`) and `check` these use."""

    core: QueueCore

    @property
    def client(self) -> redis.asyncio.Redis:
        raise NotImplementedError  # AsyncQueue's

    @property
    def runner(self) -> AsyncRunner:
        raise NotImplementedError  # AsyncQueue's

    async def check(self) -> None:
        raise NotImplementedError  # AsyncQueue's

    if TYPE_CHECKING:

        async def counts(self) -> dict[JobState, int]: ...  # AsyncQueueViews'

    # --- upgrades ------------------------------------------------------------------

    async def migrate(self, *, force: bool = False, batch: int = 100) -> MigrationReport:
        """Queue.migrate: upgrade this queue in place from protocol version 3 to 4."""
        run = Migration(self.core.name, self.core.keys, force, batch)
        more = True
        while more:
            with translated():
                more = run.step(await self.runner.run(run.call()))
        await self.check()  # now passes; registers the queue (version 3 kept no registry)
        return run.report(await self.counts())

    # --- schedules and limits ----------------------------------------------------

    async def schedule(
        self,
        schedule_id: str,
        task: str,
        data: Any = None,
        *,
        cron: str | None = None,
        every: float | timedelta | None = None,
        tz: str | None = None,
        start: datetime | float | None = None,
        end: datetime | float | None = None,
        max_runs: int | None = None,
        **options: Any,
    ) -> str:
        """Create or replace a repeatable job: a `cron` expression (5 fields,
        or 6 with seconds first) read in time zone `tz` (UTC by default), or a
        fixed interval `every` seconds; no tick before `start`, none after
        `end`, at most `max_runs` in all. Exactly one job runs per tick,
        however many workers run; returns the pending job's id. `options`:
        priority, max_failures, max_stalls, min_backoff, max_backoff, timeout,
        result_ttl, group."""
        await self.check()
        after = None
        for _ in range(10):  # a tick already run early is skipped for the next one
            call = self.core.schedule_call(
                schedule_id, task, data, cron=cron, every=every, options=options,
                after_ms=after, tz=tz, start=start, end=end, max_runs=max_runs,
            )  # fmt: skip
            job_id = ops.text((await self.runner.run(call))[0])
            if job_id:
                return job_id
            after = int(call.args[2])
        raise ConveyorError(f"schedule {schedule_id!r}: no free tick in ten tries")

    async def schedules(self) -> list[ScheduleInfo]:
        """Every schedule of the queue, soonest tick first."""
        keys = self.core.keys
        with translated():
            ids = [ops.text(i) for i in await self.client.zrange(keys.schedules, 0, -1)]
            pipe = self.client.pipeline(transaction=False)
            for schedule_id in ids:
                pipe.hgetall(keys.schedule(schedule_id))
            raws = await pipe.execute() if ids else []
        return [self.core.schedule_info(i, raw) for i, raw in zip(ids, raws, strict=True) if raw]

    async def next_runs(self, schedule_id: str, *, count: int = 5) -> list[datetime]:
        """A schedule's next `count` fire times, from its pending tick (within
        its end and its runs left); empty when it ended or does not exist."""
        with translated():
            raw = await self.client.hgetall(self.core.keys.schedule(schedule_id))
        if not raw:
            return []
        return list(self.core.schedule_info(schedule_id, raw, count=count).upcoming)

    async def unschedule(self, schedule_id: str) -> bool:
        """Remove a schedule and its pending job (if not started); True if it existed."""
        call = schedules.unschedule(self.core.keys, schedule_id)
        return int(await self.runner.run(call)) == 1

    async def set_limits(
        self, *, concurrency: int | None = None, rate: int | None = None, per: float = 1.0
    ) -> None:
        """Queue-wide limits, enforced at claim time by every worker: at most
        `concurrency` jobs running at once, at most `rate` jobs started per
        `per` seconds. None removes a limit."""
        call = self.core.limits_call("queue", concurrency=concurrency, rate=rate, per=per)
        await self.runner.run(call)

    async def set_group_limits(
        self,
        group: str | None = None,
        *,
        concurrency: int | None = None,
        rate: int | None = None,
        per: float = 1.0,
        max_waiting: int | None = None,
    ) -> None:
        """Limits of one group (a tenant, a user), or with `group=None` the
        defaults of every group that has none of its own. `max_waiting`: a
        new job of the group is refused (GroupFullError) while this many of
        its jobs wait."""
        call = self.core.limits_call(
            "group", group=group or "", concurrency=concurrency, rate=rate, per=per,
            max_waiting=max_waiting,
        )  # fmt: skip
        await self.runner.run(call)

    async def set_key_limits(
        self,
        key: str,
        *,
        concurrency: int | None = None,
        rate: int | None = None,
        per: float = 1.0,
    ) -> None:
        """Limits of a concurrency key (jobs name theirs with
        `concurrency_keys=`): at most `concurrency` of its jobs running, at
        most `rate` started per `per` seconds; changeable at any time."""
        call = self.core.limits_call("key", group=key, concurrency=concurrency, rate=rate, per=per)
        await self.runner.run(call)

    async def pause_group(self, group: str) -> None:
        """Stop claims of one group's jobs; its jobs stay queued."""
        await self.runner.run(self.core.limits_call("pause_group", group=group))

    async def resume_group(self, group: str) -> None:
        await self.runner.run(self.core.limits_call("resume_group", group=group))

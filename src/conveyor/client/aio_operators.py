"""The operators' half of AsyncQueue (conveyor.client.operators): latency,
the audit trail, quiet and stop a worker. AsyncQueue inherits it."""

from __future__ import annotations

from collections.abc import Sequence

import redis.asyncio

from conveyor.client import operators
from conveyor.client.core import QueueCore, server_ms
from conveyor.client.operators import AuditEntry
from conveyor.client.transport import translated
from conveyor.errors import WorkerNotFoundError
from conveyor.protocol import ops


class AsyncQueueOperators:
    core: QueueCore

    @property
    def client(self) -> redis.asyncio.Redis:
        raise NotImplementedError  # AsyncQueue's

    async def latency(self) -> float | None:
        """Seconds the longest-waiting of the jobs next in line (the ungrouped
        jobs' first, each group's first) has been due; None when none waits."""
        keys = self.core.keys
        with translated():
            pipe = self.client.pipeline(transaction=False)
            pipe.zrange(keys.groups, 0, -1)
            pipe.zrange(keys.gwait, 0, -1)
            groups, held = await pipe.execute()
            pipe = self.client.pipeline(transaction=False)
            for key in operators.head_keys(keys, [*groups, *held]):
                pipe.zrange(key, 0, 0)
            heads = [ops.text(i) for found in await pipe.execute() for i in found]
            pipe = self.client.pipeline(transaction=False)
            pipe.time()
            for job_id in heads:
                pipe.hmget(keys.job(job_id), ["run_at", "created_at"])
            clock, *due = await pipe.execute()
        return operators.latency(server_ms(clock), due)

    async def job_fields(self, job_ids: Sequence[str], *names: str) -> list[dict[str, str]]:
        """Some fields of the records of `job_ids` (e.g. "task", "error"), as
        stored (docs/protocol.md §4), in one round trip: what a filter over
        many jobs reads instead of whole records. A missing field or record: absent."""
        keys = [self.core.job_key(i) for i in job_ids]
        with translated():
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.hmget(key, list(names))
            replies = await pipe.execute()
        return [{n: ops.text(v) for n, v in zip(names, r, strict=True) if v is not None}
                for r in replies]  # fmt: skip

    async def record_audit(
        self, *, who: str, action: str, target: str, outcome: str, source: str = "api"
    ) -> None:
        """Add an operator's action to the queue's audit trail (about
        AUDIT_KEPT entries are kept)."""
        fields = operators.audit_fields(
            who=who, action=action, target=target, outcome=outcome, source=source
        )
        with translated():
            await self.client.xadd(
                self.core.keys.audit, dict(zip(fields[::2], fields[1::2], strict=True)),
                maxlen=operators.AUDIT_KEPT, approximate=True,
            )  # fmt: skip

    async def audit(self, *, count: int = 100) -> list[AuditEntry]:
        """The last `count` (at most AUDIT_READ) actions of the audit trail, newest first."""
        count = operators.check_count(count)
        with translated():
            entries = await self.client.xrevrange(self.core.keys.audit, count=count)
        return operators.decode_audit(entries)

    async def quiet_worker(self, worker_id: str) -> None:
        """Ask a live worker of this queue to claim no more jobs; it runs
        what it holds and keeps its leases until stopped."""
        await self._command(worker_id, "quiet")

    async def stop_worker(self, worker_id: str) -> None:
        """Ask a live worker of this queue to stop as on SIGTERM: no more
        claims, its running jobs get their grace period, then it exits."""
        await self._command(worker_id, "stop")

    async def _command(self, worker_id: str, command: str) -> None:
        keys = self.core.keys
        with translated():
            if await self.client.zscore(keys.workers, worker_id) is None:
                raise WorkerNotFoundError(f"no live worker {worker_id!r} in {keys.queue!r}")
            await self.client.zadd(keys.wake(worker_id), {operators.check_command(command): 0})

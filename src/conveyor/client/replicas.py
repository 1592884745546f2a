"""Acknowledged writes that wait for replicas: QueueSettings(min_replicas=N).

Redis replicates asynchronously, so a failover can promote a replica that
never got a write the old master acknowledged. With `min_replicas`, the
runners send `WAIT N timeout` right after the calls a caller is told
succeeded (enqueues, a worker's outcomes, job control), on the same
connection and in the same pipeline (WAIT counts the replicas that have
every write of its own connection), and raise UnreplicatedWriteError when
fewer than N replicas acknowledged within the timeout.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from conveyor.errors import UnreplicatedWriteError
from conveyor.protocol.ops import Call

# The scripts whose success a caller is told of: enqueues, outcomes, job
# control. Not claims, heartbeats, progress or reaping: losing one of those
# in a failover re-runs a job at worst, which at-least-once allows.
ACKNOWLEDGED = frozenset(
    {"enqueue", "enqueue_new", "enqueue_skip", "flow_add", "schedule", "complete", "fail",
     "retry", "cancel", "remove", "reprioritize", "promote"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class ReplicaWait:
    replicas: int
    timeout: float  # seconds

    @classmethod
    def of(cls, replicas: int, timeout: float) -> ReplicaWait | None:
        return cls(replicas, timeout) if replicas > 0 else None

    @property
    def command(self) -> tuple[Any, ...]:
        # WAIT's 0 means "forever": a timeout is at least 1 ms
        return ("WAIT", self.replicas, max(1, math.ceil(self.timeout * 1000)))

    def wanted(self, calls: Sequence[Call]) -> bool:
        return any(call.script in ACKNOWLEDGED for call in calls)

    def checked(self, calls: Sequence[Call], replies: list[Any]) -> list[Any]:
        """The calls' replies (WAIT's, last, removed); UnreplicatedWriteError
        when an acknowledged call was applied but too few replicas have it."""
        acked, replies = replies[-1], replies[:-1]
        applied = any(
            call.script in ACKNOWLEDGED and not isinstance(reply, Exception)
            for call, reply in zip(calls, replies, strict=True)
        )
        if applied and (isinstance(acked, Exception) or int(acked) < self.replicas):
            seen = acked if isinstance(acked, Exception) else f"{int(acked)} replica(s)"
            raise UnreplicatedWriteError(
                f"the write was applied on the master, but WAIT saw {seen} acknowledge it "
                f"within {self.timeout} s, not {self.replicas}: a failover now may lose it",
                replies,
            )
        return replies

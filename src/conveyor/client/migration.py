"""Upgrading a queue from the previous protocol version (docs/protocol.md §10,
migrate.lua): what Queue.migrate and AsyncQueue.migrate share."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from conveyor.client.models import MigrationReport
from conveyor.errors import MigrationRefusedError, ProtocolVersionError, ValidationError
from conveyor.job import JobState
from conveyor.protocol import ops
from conveyor.protocol.keys import PROTOCOL_VERSION, QueueKeys


@dataclass(slots=True)
class Migration:
    """The state of one migrate run between script calls."""

    queue: str
    keys: QueueKeys
    force: bool
    batch: int
    cursor: int = 0
    windows: int = 0
    calls: int = 0
    status: str = ""
    found: str = ""

    def __post_init__(self) -> None:
        batch = self.batch
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 10_000:
            raise ValidationError(f"batch must be an integer in [1, 10000], got {batch!r}")

    def call(self) -> ops.Call:
        return ops.migrate(self.keys, force=self.force, cursor=self.cursor, count=self.batch)

    def step(self, reply: Sequence[Any]) -> bool:
        """Take one call's reply; True while another call is needed."""
        status, next_cursor, windows, live, found = reply
        self.calls += 1
        self.status, self.found = ops.text(status), ops.text(found)
        self.windows += int(windows)
        if self.status == "workers":
            raise MigrationRefusedError(
                f"queue {self.queue!r}: {int(live)} worker(s) answer the roll call; stop the "
                "old workers (or pass force if they are gone), nothing was changed"
            )
        if self.status == "version":
            raise ProtocolVersionError(
                f"queue {self.queue!r} uses protocol version {self.found or 'none'}: migrate "
                f"upgrades version {PROTOCOL_VERSION - 1} only; drain it with workers of its "
                "version, or start a new queue",
                found=self.found,
            )
        if self.status == "more":
            self.cursor = int(next_cursor)
            return True
        return False

    def report(self, counts: dict[JobState, int]) -> MigrationReport:
        return MigrationReport(
            queue=self.queue, found=int(self.found), version=PROTOCOL_VERSION,
            migrated=self.status == "done", rate_windows=self.windows, groups=self.cursor,
            calls=self.calls, counts=counts,
        )  # fmt: skip

"""A producer and worker of protocol version 3, driving that version's Lua
scripts kept in tests/data/protocol3 (the layout `conveyor migrate` upgrades)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis

from conveyor.protocol.keys import QueueKeys

DATA = Path(__file__).resolve().parent.parent / "data" / "protocol3"
MAXLEN = 1000


def _source(name: str) -> str:
    lines = []
    for line in (DATA / f"{name}.lua").read_text("utf-8").splitlines():
        if line.startswith("-- @include "):
            lines.append((DATA / "include" / f"{line.split()[-1]}.lua").read_text("utf-8"))
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"


class Version3:
    """One queue written as a version 3 client would (docs/protocol.md §10)."""

    def __init__(self, client: redis.Redis, queue: str, prefix: str = "conveyor") -> None:
        self.client = client
        self.k = QueueKeys(prefix, queue)
        self.scripts = {
            n: client.register_script(_source(n))
            for n in ("enqueue", "claim", "complete", "fail", "schedule", "heartbeat")
        }
        client.hsetnx(self.k.meta, "version", 3)
        self.first_tick = 0  # of the schedule written last

    def enqueue(self, job_id: str, task: str, data: str = "null", opts: str = "") -> str:
        k = self.k
        keys = [k.base, k.meta, k.ready, k.scheduled, k.marker, k.events, k.blocked,
                k.completed, k.failed]  # fmt: skip
        reply = self.scripts["enqueue"](keys, [MAXLEN, 6, job_id, task, data, job_id, "", opts])
        return str(reply[0], "utf-8")

    def claim(self, worker: str, count: int, lease_ms: int) -> list[str]:
        k = self.k
        keys = [k.base, k.meta, k.ready, k.scheduled, k.active, k.marker, k.events, k.failed,
                k.groups, k.gwait, k.gactive]  # fmt: skip
        reply = self.scripts["claim"](keys, [worker, count, lease_ms, "tok", 100, MAXLEN, 1])
        return [str(reply[i], "utf-8") for i in range(3, len(reply), 14)]

    def complete(self, job_id: str, result: str) -> Any:
        k = self.k
        keys = [k.base, k.active, k.completed, k.ready, k.scheduled, k.marker, k.events,
                k.blocked]  # fmt: skip
        return self.scripts["complete"](keys, [MAXLEN, job_id, "tok", result])

    def fail(self, job_id: str, error: str, *, permanent: bool) -> Any:
        k = self.k
        keys = [k.base, k.active, k.failed, k.ready, k.scheduled, k.marker, k.events,
                k.blocked]  # fmt: skip
        args = [MAXLEN, job_id, "tok", error, int(permanent), "", 0]
        return [str(x, "utf-8") for x in self.scripts["fail"](keys, args)]

    def schedule(self, sid: str, task: str, first_ms: int, every_ms: int) -> Any:
        k = self.k
        keys = [k.base, k.meta, k.ready, k.scheduled, k.marker, k.events, k.completed,
                k.failed, k.schedules]  # fmt: skip
        template = [task, "null", 1000, 3, 3, 1000, 300000, 300000, 86400000, ""]
        return self.scripts["schedule"](keys, [MAXLEN, sid, first_ms, "", every_ms, *template])

    def heartbeat(self, worker: str, ttl_ms: int) -> Any:
        keys = [self.k.base, self.k.active, self.k.workers]
        return self.scripts["heartbeat"](keys, [worker, 60_000, ttl_ms, "{}"])

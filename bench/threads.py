"""The driver's two helper threads: the start gate of multi-process runs and the watcher
of a system's events stream (latency by completion events)."""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

if TYPE_CHECKING:
    from bench.driver import Ctx

GATE_WAIT = 30.0  # s the start gate waits for every worker process (bench/mark.py)


class StartGate(threading.Thread):
    """Opens bench/mark.py's start gate once `procs` worker processes wait at
    it (or after GATE_WAIT s), so that they start the backlog together."""

    def __init__(self, ctx: Ctx, procs: int) -> None:
        super().__init__(name="bench-gate", daemon=True)
        self.dir = Path(tempfile.mkdtemp(prefix="gate-", dir=ctx.logdir))
        self.procs = procs
        self.waited: float | None = None
        self.ready = 0
        ctx.env["BENCH_GATE"] = str(self.dir)

    def run(self) -> None:
        started = time.monotonic()
        deadline = started + GATE_WAIT
        while time.monotonic() < deadline:
            self.ready = sum(1 for p in self.dir.iterdir() if p.name.startswith("ready-"))
            if self.ready >= self.procs:
                break
            time.sleep(0.001)
        self.waited = time.monotonic() - started
        (self.dir / "go").touch()

    def report(self) -> dict[str, Any]:
        return {"gate_processes_ready": self.ready, "gate_opened_after_s": self.waited}


class CompletionWatcher(threading.Thread):
    """Follows a system's events stream and notes when each `completed` event arrives."""

    def __init__(self, url: str, spec: tuple[str, bytes, bytes, bytes]) -> None:
        super().__init__(daemon=True, name="bench-completion")
        self.client = redis.Redis.from_url(url)
        self.key, self.field, self.value, self.id_field = spec
        self.seen: dict[str, float] = {}
        self.stop = threading.Event()
        last = self.client.xrevrange(self.key, count=1)
        self.after = last[0][0] if last else b"0-0"

    def run(self) -> None:
        while not self.stop.is_set():
            reply = self.client.xread({self.key: self.after}, count=1000, block=200)
            now = time.time()
            for _, entries in reply or []:
                for entry_id, fields in entries:
                    self.after = entry_id
                    if fields.get(self.field) == self.value:
                        # Conveyor's one entry for several jobs names them in `ids` (§11)
                        many = fields.get(b"ids")
                        for job_id in many.split() if many else [fields.get(self.id_field, b"")]:
                            self.seen.setdefault(job_id.decode(), now)

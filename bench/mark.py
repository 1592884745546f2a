"""The job-side marker shared by every system (Conveyor and the peers).

Every benchmark job calls `mark(arg)` and nothing else. The marker keeps the
count and the time of each job start in process memory; a daemon thread
flushes them every 5 ms to the *mark* Redis (BENCH_MARK_URL), a second
private server, so jobs pay no round trip and the queue's own Redis sees only
the library's traffic. When `arg` is a positive float it is the enqueue time
(time.time() taken just before the enqueue call): the start latency is then
recorded too.

With BENCH_GATE set to a directory (the runs of two or more worker processes),
a process's first job waits at a start gate: it leaves a file `ready-<pid>`
there and waits until the harness creates `go`, which it does once every
process waits there (driver.Ctx.open_gate). The processes then start
together, each with the jobs it claimed meanwhile: without the gate the second
process's interpreter starts while the first already drains the backlog on the
same 2 cores, and a short run measured mostly one process (bench/README.md,
"Scenarios", the start gate). The job's start time is taken after the gate. Files, not
the mark server: a process forked per job (RQ) pays one `stat` for it.

Keys on the mark server:
  bench:done          count of jobs started (INCRBY per flush)
  bench:first         hash pid -> time of the first job start in that process
  bench:last          hash pid -> time of the latest job start in that process
  bench:lat           list of "t0 start" pairs (latency runs only)
"""

from __future__ import annotations

import collections
import os
import threading
import time
from typing import Any

import redis

# s between flushes; bench.execution's CPU-bound jobs take 0.05 (BENCH_MARK_FLUSH): a flush
# takes the GIL from the job it runs beside. Spans come from the starts, not the flushes.
FLUSH_EVERY = float(os.environ.get("BENCH_MARK_FLUSH", "0.005"))

_pending: collections.deque[tuple[float, float]] = collections.deque()
_lock = threading.Lock()
_owner_pid = 0  # the process whose flusher thread runs (fork-safe restart)
GATE = os.environ.get("BENCH_GATE", "")
GATE_POLL = 0.001  # s between looks for the gate's `go`
GATE_LIMIT = 60.0  # s: a gate never opened (a harness gone) lets the jobs through
_gate_open = not GATE


def mark(arg: Any = None) -> None:
    """Record one job start; `arg` is the enqueue time (a float) or a payload."""
    if not _gate_open:
        _wait_at_gate()
    now = time.time()
    t0 = arg if isinstance(arg, float) else 0.0
    _pending.append((now, t0))
    if _owner_pid != os.getpid():
        _start()


def _wait_at_gate() -> None:
    """Block this job (and with it its event loop, or the other threads that
    reach the gate) until the harness opens the gate."""
    global _gate_open
    go = os.path.join(GATE, "go")
    with _lock:
        if _gate_open or os.path.exists(go):
            _gate_open = True
            return
        with open(os.path.join(GATE, f"ready-{os.getpid()}"), "w"):
            pass
        deadline = time.monotonic() + GATE_LIMIT
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(GATE_POLL)
        _gate_open = True


def _start() -> None:
    global _owner_pid
    with _lock:
        if _owner_pid == os.getpid():
            return
        _owner_pid = os.getpid()
        thread = threading.Thread(target=_flush_forever, name="bench-mark", daemon=True)
        thread.start()


def _flush_forever() -> None:
    pid = str(os.getpid())
    client = redis.Redis.from_url(os.environ["BENCH_MARK_URL"])
    first_sent = False
    while True:
        time.sleep(FLUSH_EVERY)
        batch = []
        while _pending:
            batch.append(_pending.popleft())
        if not batch:
            continue
        pipe = client.pipeline(transaction=False)
        starts = [start for start, _ in batch]
        if not first_sent:
            pipe.hset("bench:first", pid, repr(min(starts)))
            first_sent = True
        pipe.hset("bench:last", pid, repr(max(starts)))
        lat = [f"{t0!r} {start!r}" for start, t0 in batch if t0 > 0]
        if lat:
            pipe.rpush("bench:lat", *lat)
        pipe.incrby("bench:done", len(batch))
        try:
            pipe.execute()
        except redis.RedisError:
            # the harness stopped the server: nothing more to record
            for item in reversed(batch):
                _pending.appendleft(item)
            time.sleep(0.1)

"""Scenario 22: a job that eats memory until a user-space OOM killer SIGKILLs its worker,
alone and while its producer re-enqueues its id."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import traceback
from collections import Counter
from typing import Any

from chaos import ledger
from chaos.checker import Result, tally
from chaos.harness import Enqueue, Scene, WorkerPool, admin, drained
from chaos.scenarios import scenario
from conveyor.client.events import decode_entries
from conveyor.errors import ConveyorError
from conveyor.protocol.keys import QueueKeys

# --------------------------------------------------------------------------- 22


class OomKiller(threading.Thread):
    """A user-space OOM killer (what earlyoom or systemd-oomd do): every 20 ms it reads the
    resident memory of each worker and of its child processes from /proc and SIGKILLs the one
    past `limit_mb`, as the kernel's OOM killer picks the process that holds the memory. (No
    cgroup is needed, and the machine, shared with others, never runs short: the hog is killed
    at a few hundred MiB.) A worker killed takes its children with it (its process group); a
    child killed leaves its worker running."""

    def __init__(self, scene: Scene, pools: list[WorkerPool], limit_mb: int) -> None:
        super().__init__(daemon=True)
        self.scene, self.pools, self.limit = scene, pools, limit_mb << 20
        self.kills: list[tuple[int, int]] = []  # (pid, resident bytes)
        self._halt = threading.Event()
        self._killed: set[int] = set()  # a killed process lingers until reaped: kill it once
        self._page = os.sysconf("SC_PAGE_SIZE")

    def run(self) -> None:
        while not self._halt.wait(0.02):
            for pool in self.pools:
                for proc in pool.live():
                    for pid in [proc.pid, *_descendants(proc.pid)]:
                        resident = self._resident(pid)
                        if resident > self.limit and pid not in self._killed:
                            self._killed.add(pid)
                            self.scene.ledger.record("kill", "oom", 0, "SIGKILL", pid=pid)
                            if pid == proc.pid:
                                proc.signal(signal.SIGKILL)
                            else:
                                with contextlib.suppress(ProcessLookupError):
                                    os.kill(pid, signal.SIGKILL)
                            self.kills.append((pid, resident))

    def _resident(self, pid: int) -> int:
        try:
            with open(f"/proc/{pid}/statm") as statm:
                return int(statm.read().split()[1]) * self._page
        except (OSError, ValueError, IndexError):
            return 0

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


def _descendants(pid: int) -> list[int]:
    """The processes below `pid` (its children's children too), from /proc: each thread
    lists the children it started."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            threads = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in threads:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as children:
                    kids = [int(k) for k in children.read().split()]
            except (OSError, ValueError):
                continue
            found += kids
            todo += kids
    return found


def _hog_phase(
    scene: Scene,
    r: Result,
    pool: WorkerPool,
    *,
    label: str,
    lease: float,
    max_stalls: int,
    innocents: int,
    reenqueue_s: float,
) -> dict[str, Any]:
    queue = pool.queue
    producer = scene.producer(pool.url, queue=queue)
    # ids name their queue: the ledger of the two phases is one file
    # the hog queues behind some jobs and ahead of others that keep coming: each of its runs
    # finds neighbours to take down unless it runs alone (the victims of its first run, now
    # suspects themselves, go first: they run alone, at their old place)
    hog = Enqueue(f"{queue}-hog", "work", {"eat_mb": 1024}, {"max_stalls": max_stalls})
    others = [Enqueue(f"{queue}-n{i:02d}", "work", {"s": 0.5}) for i in range(innocents)]
    producer.send_until_acked([*others, hog], 10)
    client = admin(pool.url, queue)
    keys = QueueKeys("conveyor", queue)

    def done() -> bool:
        return drained(client, queue, 1 + len(others))()

    limit = (max_stalls + 1) * (lease * 4 / 3 + 4) + reenqueue_s + 30
    t0 = time.monotonic()
    sent: Counter[str] = Counter()
    feed_s = max(reenqueue_s, 4.0)  # other jobs keep coming: every hog run has neighbours
    for n in range(int(limit / 0.1) + 1):
        pool.respawn_dead()  # a supervisor
        elapsed = time.monotonic() - t0
        if elapsed < feed_s and n % 3 == 0:
            late = Enqueue(f"{queue}-m{n:04d}", "work", {"s": 0.5})
            if producer.send([late]):
                others.append(late)
        if reenqueue_s and elapsed < reenqueue_s:  # the producer keeps asking for it
            try:
                again = producer.queue.enqueue(hog.task, hog.data, id=hog.id, **hog.options)
                sent[again.outcome] += 1
            except ConveyorError as exc:
                sent[type(exc).__name__] += 1
        elif done() or elapsed > limit:
            break
        time.sleep(0.1)
    entries = list(ledger.read(scene.ledger_path))
    ids = [hog.id, *(o.id for o in others)]
    t = tally(entries, client, queue, ids=ids)
    r.absorb(t)
    pids = {p.pid for p in pool.all_procs}
    kills = [e for e in entries if e.kind == "kill" and e.id == "oom" and e.pid in pids]
    # an innocent run that began on a process the OOM killer then killed, and never finished
    # there, was taken down with the hog
    took_down: dict[int, list[str]] = {}
    for kill in kills:
        victims = [
            o.id for o in others
            for s in t.starts.get(o.id, ())
            if s.pid == kill.pid and s.mono <= kill.mono
            and not any(f.pid == kill.pid for f in t.finishes.get(o.id, ()))
        ]  # fmt: skip
        if victims:
            took_down[kill.pid] = victims
    hog_view = t.view[hog.id]
    hog_runs = sorted(t.starts.get(hog.id, []), key=lambda e: e.mono)
    r.check(f"{label}: the hog was killed for its memory", kills, len(kills))
    r.check(
        f"{label}: the hog never ate its whole ration (every run was killed first)",
        "MemoryError" not in (hog_view.error or "") and not t.finishes.get(hog.id),
        hog_view.error,
    )
    r.check(
        f"{label}: the hog ended failed, as stalled",
        hog_view.state == "failed" and "StalledError" in (hog_view.error or ""),
        (hog_view.state, hog_view.error),
    )
    r.check(
        f"{label}: every other job completed",
        all(t.view[o.id].state == "completed" for o in others),
        {o.id: t.view[o.id].state for o in others if t.view[o.id].state != "completed"},
    )
    r.check(
        f"{label}: the hog took other jobs down at most once",
        len(took_down) <= 1,
        {str(pid): ids for pid, ids in took_down.items()},
    )
    r.check(
        f"{label}: each re-run of the hog is visible (attempt >= 2)",
        all(run.attempt >= 2 for run in hog_runs[1:]),
        [run.attempt for run in hog_runs],
    )
    trail = [
        f"{event.name}:{event.fields.get('stalls', event.fields.get('attempt', ''))}"
        for event in decode_entries(client.xrange(keys.events, count=10_000))  # per job (§11)
        if event.job_id == hog.id
    ]
    return {
        "hog_events": trail,
        "hog_runs": len(hog_runs),
        "oom_kills": len(kills),
        "kills_that_took_others_down": len(took_down),
        "hog_stalls": hog_view.stalls,
        "reenqueue_outcomes": dict(sent),
        "ready_left": client.zcard(keys.ready),
    }


@scenario(
    22,
    "memory-hog",
    "A job eats memory until an OOM killer SIGKILLs its worker, alone and while its producer "
    "re-enqueues its id: it fails after max_stalls, takes others down at most once",
    full=dict(lease=2.0, max_stalls=3, innocents=24, reenqueue_s=10.0, limit_mb=300),
    bounded=dict(lease=1.0, max_stalls=2, innocents=8, reenqueue_s=4.0, limit_mb=300),
)
def memory_hog(
    scene: Scene, *, lease: float, max_stalls: int, innocents: int, reenqueue_s: float,
    limit_mb: int,
) -> Result:  # fmt: skip
    r = Result("memory-hog")
    url = scene.server().url
    alone = scene.workers(url, 1, queue="hog1", concurrency=4, lease=lease)
    pushed = scene.workers(url, 1, queue="hog2", concurrency=4, lease=lease)
    for pool in (alone, pushed):
        pool.start()
    r.check("workers ready", alone.wait_ready(20) and pushed.wait_ready(20))
    killer = OomKiller(scene, [alone, pushed], limit_mb)
    killer.start()
    out: dict[str, dict[str, Any]] = {}

    def phase(name: str, pool: WorkerPool, label: str, again_s: float) -> None:
        try:
            out[name] = _hog_phase(
                scene, r, pool, label=label, lease=lease, max_stalls=max_stalls,
                innocents=innocents, reenqueue_s=again_s,
            )  # fmt: skip
        except Exception:
            r.check(f"{label}: the phase ran", False, traceback.format_exc()[-2000:])

    phases = [
        threading.Thread(target=phase, args=("alone", alone, "no re-enqueue", 0.0)),
        threading.Thread(target=phase, args=("re-enqueued", pushed, "re-enqueued", reenqueue_s)),
    ]
    for phase in phases:
        phase.start()
    for phase in phases:
        phase.join(600)
    killer.stop()
    r.kills = len(killer.kills)
    r.check("both phases ran to their end", set(out) == {"alone", "re-enqueued"}, sorted(out))
    r.check(
        f"no re-enqueue: the hog ran max_stalls = {max_stalls} times",
        out.get("alone", {}).get("hog_runs") == max_stalls,
        out.get("alone", {}).get("hog_runs"),
    )
    r.metrics.update(
        phases=out, limit_mb=limit_mb, killed_at_mb=[round(b / 2**20) for _, b in killer.kills]
    )
    return r

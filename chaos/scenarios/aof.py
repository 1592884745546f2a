"""Scenarios 6 and 7: Redis killed with its AOF cut back to what was on disk, with
`appendfsync always` (nothing acknowledged lost) and `everysec` (at most the last second)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from chaos import ledger
from chaos.checker import Result, tally
from chaos.harness import Enqueue, Scene, admin, idle, wait_until
from chaos.scenarios import scenario


def _aof_cut(
    scene: Scene,
    r: Result,
    *,
    fsync: str,
    window: float,
    jobs: int,
    lease: float,
    workers: int,
    concurrency: int,
) -> None:
    """Stream jobs, SIGKILL Redis mid-stream, cut its AOF (`always`: to the size at the last
    acknowledged enqueue; `everysec`: to the size one second before the kill, what an OS crash
    loses at most), restart it on the same files, and let everyone carry on."""
    from chaos.harness import aof_incr_file, file_size

    server = scene.server(
        appendonly=True, appendfsync=fsync,
        extra_args=["--auto-aof-rewrite-percentage", "0", "--aof-load-truncated", "yes"],
    )  # fmt: skip
    url = server.url
    incr = aof_incr_file(server)
    r.check("the AOF file to cut was found", incr is not None, server.data_dir)
    pool = scene.workers(url, workers, concurrency=concurrency, lease=lease)
    pool.start()
    r.check("workers ready", pool.wait_ready(20))
    producer = scene.producer(url, aof=lambda: file_size(incr))
    rng = scene.rng
    specs = [
        Enqueue(f"j{n:06d}", "work", {"s": round(rng.uniform(0.01, 0.04), 3)}) for n in range(jobs)
    ]
    feeder = threading.Thread(
        target=producer.stream,
        args=(specs,),
        kwargs={"seconds": window, "batch": 5, "retry_for": 60},
    )
    feeder.start()
    time.sleep(rng.uniform(0.45, 0.6) * window)
    killed_at = time.monotonic()
    server.kill()
    scene.ledger.record("kill", "redis", 0, "SIGKILL", pid=0)
    acks = [e for e in ledger.read(scene.ledger_path) if e.kind == "enq" and e.mono <= killed_at]
    if fsync == "always":
        cut_entry = acks[-1]
    else:
        before = [e for e in acks if e.mono <= killed_at - 1.0]
        cut_entry = before[-1] if before else acks[0]
    cut = int(cut_entry.extra)
    full_size = file_size(incr)
    assert incr is not None
    os.truncate(incr, cut)
    server.start()
    restarted_at = time.monotonic()
    r.check("Redis restarted on the cut AOF", server.running, server.log_tail(5))
    feeder.join(timeout=window + 90)
    client = admin(url)
    done = wait_until(idle(client, "chaos"), 60, 0.1)
    r.check("all surviving jobs finished after the restart", done)
    entries = list(ledger.read(scene.ledger_path))
    t = tally(entries, client, "chaos")
    kept = {e.id for e in entries if e.kind == "enq" and e.mono <= cut_entry.mono}
    # the window: acknowledged after the cut by a call sent before the kill (its ack may be
    # recorded a little after the kill when the machine is busy: it still came from the old
    # server); a call sent after the kill was answered by the restarted server
    window_ids = {
        e.id
        for e in entries
        if e.kind == "enq"
        and cut_entry.mono < e.mono
        and producer.sent_at.get(e.id, e.mono) <= killed_at
    }
    lost_before_cut = sorted(set(t.lost) & kept)
    lost_in_window = sorted(set(t.lost) & window_ids)
    lost_elsewhere = sorted(set(t.lost) - kept - window_ids)
    r.absorb(t)
    r.kills = 1
    firsts = [min(f.mono for f in fs) for fs in t.finishes.values()]
    resumed = min((m for m in firsts if m > restarted_at), default=None)
    r.max_recovery_s = None if resumed is None else resumed - restarted_at
    r.metrics.update(
        appendfsync=fsync,
        aof_bytes_at_kill=full_size,
        aof_cut_to=cut,
        bytes_cut=full_size - cut,
        acked_before_cut=len(kept),
        acked_in_cut_window=len(window_ids),
        cut_window_s=round(killed_at - cut_entry.mono, 3),
        lost_in_cut_window=len(lost_in_window),
        vanished_after_running=len([j for j in t.lost if j in t.finishes]),
        enqueue_errors_during_outage=len(producer.errors),
        unsure_enqueues=producer.unsure,
        first_completion_after_restart_s=None
        if resumed is None
        else round(resumed - restarted_at, 2),
        outage_s=round(restarted_at - killed_at, 2),
        reruns=len(t.reruns),
    )
    r.check(
        "every acknowledged enqueue made it to Redis (producer retried what failed)",
        len(producer.acked) == jobs,
        f"{len(producer.acked)}/{jobs}",
    )
    r.check(
        "0 lost among jobs acknowledged before the cut point",
        not lost_before_cut,
        lost_before_cut[:10],
    )
    r.check("0 lost outside the cut window", not lost_elsewhere, lost_elsewhere[:10])
    r.check("0 unexpected", not t.unexpected, t.unexpected[:10])
    r.check("0 completions accepted twice", not t.double_acks, t.double_acks[:10])
    r.check(
        "workers reconnected: every worker process is still alive",
        all(p.alive for p in pool.live()) and len(pool.live()) == workers,
    )
    r.check(
        "workers resumed within 10 s of the restart",
        r.max_recovery_s is not None and r.max_recovery_s <= 10,
        r.max_recovery_s,
    )
    client.close()


@scenario(
    6,
    "redis-kill-aof-always",
    "Redis SIGKILLed, AOF (appendfsync always) cut at the last acknowledged write: 0 lost",
    full=dict(window=10.0, jobs=5_000, lease=2.0, workers=2, concurrency=8),
    bounded=dict(window=4.0, jobs=1_000, lease=2.0, workers=2, concurrency=8),
)
def aof_always(scene: Scene, **params: Any) -> Result:
    r = Result("redis-kill-aof-always")
    _aof_cut(scene, r, fsync="always", **params)
    r.check("0 acknowledged jobs lost", r.lost == 0, r.lost)
    return r


@scenario(
    7,
    "redis-kill-aof-everysec",
    "The same with appendfsync everysec, the AOF cut to its size 1 s before the kill: the loss "
    "is confined to that last second",
    full=dict(window=10.0, jobs=5_000, lease=2.0, workers=2, concurrency=8),
    bounded=dict(window=4.0, jobs=1_000, lease=2.0, workers=2, concurrency=8),
)
def aof_everysec(scene: Scene, **params: Any) -> Result:
    r = Result("redis-kill-aof-everysec")
    _aof_cut(scene, r, fsync="everysec", **params)
    r.check(
        "some acknowledged jobs fell in the cut window (the test cut something)",
        r.metrics.get("acked_in_cut_window", 0) > 0,
        r.metrics.get("acked_in_cut_window"),
    )
    return r

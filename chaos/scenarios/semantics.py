"""Scenarios 26-27: job semantics under several workers and SIGKILLs — rate
limits that hold in every window (docs/protocol.md §3.2), a resumable job
(§16.7)."""

from __future__ import annotations

import json
import time

from chaos import ledger
from chaos.checker import Result
from chaos.harness import Enqueue, Scene, admin, drained, settings, wait_until
from chaos.scenarios import scenario
from conveyor import Queue
from conveyor.protocol.keys import QueueKeys


def _busiest(starts: list[int], window_ms: int) -> int:
    """The most leases in any interval [t, t + window_ms) of server time."""
    starts = sorted(starts)
    best, low = 0, 0
    for high, t in enumerate(starts):
        while starts[low] <= t - window_ms:
            low += 1
        best = max(best, high - low + 1)
    return best


@scenario(
    26,
    "rate-limit-windows",
    "several workers race a queue rate and a group rate: no window of the stated length "
    "holds more leases than the limit",
    full=dict(jobs=1_200, grouped=300, workers=3, concurrency=8, rate=40, per=0.5,
              group_rate=6, group_per=0.3),
    bounded=dict(jobs=160, grouped=40, workers=2, concurrency=8, rate=40, per=0.5,
                 group_rate=6, group_per=0.3),
)  # fmt: skip
def rate_limit_windows(
    scene: Scene,
    *,
    jobs: int,
    grouped: int,
    workers: int,
    concurrency: int,
    rate: int,
    per: float,
    group_rate: int,
    group_per: float,
    queue: str = "chaos",
) -> Result:
    r = Result("rate-limit-windows")
    url = scene.server().url
    with Queue(queue, url=url, settings=settings()) as q:
        q.set_limits(rate=rate, per=per)
        q.set_group_limits("g", rate=group_rate, per=group_per)
    producer = scene.producer(url, queue=queue)
    specs = [Enqueue(f"j{n:05d}", "work", {"s": 0.005}) for n in range(jobs)]
    specs += [Enqueue(f"g{n:05d}", "work", {"s": 0.005}, {"group": "g"}) for n in range(grouped)]
    scene.rng.shuffle(specs)
    r.check("every enqueue acknowledged", producer.send_until_acked(specs, 60), len(specs))
    pool = scene.workers(url, workers, queue=queue, concurrency=concurrency)
    t0 = time.monotonic()
    pool.start()
    r.check("workers announced themselves", pool.wait_ready(20))
    total = jobs + grouped
    # at the limit the queue needs total / rate windows; allow three times that, plus start-up
    budget = 3 * total / rate * per + 30
    client = admin(url, queue)
    r.check("all jobs finished", wait_until(drained(client, queue, total), budget, 0.1))
    took = time.monotonic() - t0
    keys = QueueKeys("conveyor", queue)
    pipe = client.pipeline(transaction=False)
    for spec in specs:
        pipe.hmget(keys.job(spec.id), "started_at", "attempts", "state")
    records = pipe.execute()
    client.close()
    pool.stop()
    starts = {s.id: int(f[0]) for s, f in zip(specs, records, strict=True) if f[0] is not None}
    once = all(f[1] in (None, b"1") and f[2] == b"completed" for f in records)
    r.check("every job completed after exactly one lease (each lease is in the count)", once)
    queue_busiest = _busiest(list(starts.values()), round(per * 1000))
    group_busiest = _busiest([t for i, t in starts.items() if i.startswith("g")],
                             round(group_per * 1000))  # fmt: skip
    r.check(
        f"no {per} s window holds more than {rate} leases (queue)",
        queue_busiest <= rate,
        f"busiest window: {queue_busiest}",
    )
    r.check(
        f"no {group_per} s window holds more than {group_rate} leases (group g)",
        group_busiest <= group_rate,
        f"busiest window: {group_busiest}",
    )
    span_s = (max(starts.values()) - min(starts.values())) / 1000 if starts else 0.0
    achieved = total / span_s if span_s else 0.0
    r.check(
        f"the limiter lets jobs through: at least half of {rate / per:.0f} jobs/s",
        achieved >= rate / per / 2,
        f"{achieved:.1f} jobs/s",
    )
    r.jobs = total
    r.metrics.update(
        workers=workers,
        concurrency=concurrency,
        queue_busiest_window=queue_busiest,
        group_busiest_window=group_busiest,
        jobs_per_s=round(achieved, 1),
        seconds=round(took, 2),
    )
    return r


@scenario(
    27,
    "resumable-sigkill",
    "a job iterating 100,000 items checkpoints each batch; its worker is SIGKILLed again and "
    "again: it finishes with every item counted once, no finished batch done again",
    full=dict(items=100_000, batch=500, pause=0.02, kills=8, lease=1.0),
    bounded=dict(items=100_000, batch=2_000, pause=0.03, kills=3, lease=1.0),
)
def resumable_sigkill(
    scene: Scene, *, items: int, batch: int, pause: float, kills: int, lease: float,
    queue: str = "chaos",
) -> Result:  # fmt: skip
    r = Result("resumable-sigkill")
    url = scene.server().url
    producer = scene.producer(url, queue=queue)
    job = Enqueue("iter", "iterate", {"items": items, "batch": batch, "pause": pause},
                  {"max_stalls": kills + 5})  # fmt: skip
    r.check("enqueue acknowledged", producer.send_until_acked([job], 30))
    pool = scene.workers(url, 1, queue=queue, concurrency=1, lease=lease,
                         target="chaos.resumable_app:tasks")  # fmt: skip
    pool.start()
    r.check("the worker announced itself", pool.wait_ready(20))
    batches = -(-items // batch)
    done = 0
    for _ in range(kills):
        # kill it a random while into a run that has saved at least one batch
        saved_before = _saved(scene)

        def one_more_saved(before: int = saved_before) -> bool:
            return _saved(scene) > before

        wait_until(one_more_saved, 60, 0.01)
        time.sleep(scene.rng.uniform(0.05, 4 * pause))
        if _saved(scene) >= batches:
            break
        pool.kill(0)
        pool.start(0)
        done += 1
    client = admin(url, queue)
    budget = 3 * batches * pause + (done + 1) * (lease + lease / 3 + 5) + 30
    r.check("the job finished", wait_until(drained(client, queue, 1), budget, 0.1))
    raw = client.hget(QueueKeys("conveyor", queue).job("iter"), "result")
    client.close()
    pool.stop()
    result = json.loads(raw) if raw else {}
    entries = list(ledger.read(scene.ledger_path))
    resumes = [(e.mono, int(e.extra)) for e in entries if e.kind == "resume" and e.id == "iter"]
    saves = [(e.mono, int(e.extra)) for e in entries if e.kind == "saved" and e.id == "iter"]
    r.kills = done
    r.check(f"at least {min(kills, 2)} SIGKILLs mid-run", done >= min(kills, 2), done)
    r.check(
        "every item counted exactly once (the sum of 0 .. n-1)",
        result.get("sum") == items * (items - 1) // 2 and result.get("next") == items,
        {k: result.get(k) for k in ("next", "sum")},
    )
    # each run resumes at (or after: a save may land just before the kill
    # is noted) the last position a run reported saved before it started
    behind = [
        (at, start)
        for at, start in resumes
        if start < max((pos for t, pos in saves if t < at), default=0)
    ]
    r.check("no run restarted behind a saved checkpoint (no finished batch redone)",
            not behind, behind[:5])  # fmt: skip
    positions = [pos for _, pos in saves]
    again = sorted({p for p in positions if positions.count(p) > 1})
    r.check("no batch saved twice (no finished item done again)", not again, again[:5])
    r.jobs = 1
    r.metrics.update(items=items, batch=batch, runs=len(resumes), checkpoints=len(saves))
    return r


def _saved(scene: Scene) -> int:
    return sum(1 for e in ledger.read(scene.ledger_path) if e.kind == "saved")

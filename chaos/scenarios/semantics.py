"""Scenario 19: job semantics under several workers — rate limits that hold in
every window (docs/protocol.md §3.2)."""

from __future__ import annotations

import time

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
    19,
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

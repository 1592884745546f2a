"""Scenario 18: a soak. No-op jobs through one worker; memory flat, Redis back to baseline."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

from chaos import ledger
from chaos.checker import Result
from chaos.harness import Scene, admin, settings, wait_until
from chaos.scenarios import scenario
from conveyor import JobRequest, Queue
from conveyor.protocol.keys import QueueKeys


def _rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _keys(client) -> list[bytes]:  # type: ignore[no-untyped-def]
    out: list[bytes] = []
    cursor = 0
    for _ in range(100_000):
        cursor, batch = client.scan(cursor, count=1000)
        out.extend(batch)
        if cursor == 0:
            break
    return out


@scenario(
    18,
    "soak",
    "1,000,000 no-op jobs through one worker: memory flat after warm-up, Redis back to "
    "baseline once retention expires",
    full=dict(
        jobs=1_000_000,
        concurrency=10,
        result_ttl=10.0,
        backlog=20_000,
        max_seconds=1800,
        lease=10.0,
    ),
    bounded=dict(
        jobs=10_000, concurrency=10, result_ttl=0.5, backlog=5_000, max_seconds=120, lease=2.0
    ),
)
def soak(
    scene: Scene,
    *,
    jobs: int,
    concurrency: int,
    result_ttl: float,
    backlog: int,
    max_seconds: float,
    lease: float,
) -> Result:
    r = Result("soak")
    url = scene.server().url
    client = admin(url)
    keys = QueueKeys("conveyor", "chaos")
    pool = scene.workers(
        url, 1, concurrency=concurrency, lease=lease, env={"CHAOS_EVENTS_MAXLEN": "10000"}
    )  # the default stream length
    pool.start()
    r.check("worker ready", pool.wait_ready(20))
    proc = pool.procs[0]
    assert proc is not None
    q = Queue("chaos", url=url, settings=settings(events_maxlen=10_000))
    q.check()
    baseline = sorted(_keys(client))
    t0 = time.monotonic()
    sent = 0
    samples: list[tuple[float, int, int]] = []  # (seconds, processed, rss KiB)
    last_sample = 0.0
    processed = 0
    with ledger.Ledger(scene.ledger_path) as led:
        for _ in range(jobs + 100_000):  # bounded: one pass per chunk or per wait
            now = time.monotonic()
            if now - t0 > max_seconds:
                break
            if now - last_sample >= 1.0:
                last_sample = now
                raw = client.get(keys.worker(_worker_id(client, keys)))
                processed = json.loads(raw)["processed"] if raw else processed
                rss = _rss_kib(proc.pid)
                if rss is not None:
                    samples.append((now - t0, processed, rss))
            if processed >= jobs:
                break
            waiting = client.zcard(keys.ready)
            if sent < jobs and waiting < backlog:
                chunk = [
                    JobRequest("noop", None, {"id": f"s{n:07d}", "result_ttl": result_ttl})
                    for n in range(sent, min(jobs, sent + 1000))
                ]
                q.enqueue_many(chunk)
                led.record_many("enq", [j.options["id"] for j in chunk])
                sent += len(chunk)
            else:
                time.sleep(0.05)
    run_s = time.monotonic() - t0
    r.check(
        f"all {jobs} jobs processed within {max_seconds:.0f} s",
        processed >= jobs,
        f"{processed} in {run_s:.0f} s",
    )
    # retention runs out: every job record expires; only the queue's fixed keys remain
    fixed = {keys.events, keys.completed, keys.failed, keys.ready, keys.scheduled, keys.active,
             keys.marker, keys.blocked, keys.totals}  # fmt: skip
    fixed_b = {k.encode() for k in fixed}
    # the metrics history: one hash per hour, each expiring a week after its last write
    # (checked below: a history key without a TTL fails "no key without a TTL")
    history = tuple(f"{keys.base}{kind}:".encode() for kind in ("metrics", "timings", "tmax"))

    def back_to_baseline() -> bool:
        return not [
            k for k in _keys(client)
            if k not in baseline and k not in fixed_b and not k.startswith(history)
        ]  # fmt: skip

    # a finished record is deleted by a sweep (each worker's beat sweeps a batch) once its
    # retention ran out, or expires by itself EXPIRY_GRACE (60 s) later, whichever is first
    expired_at = time.monotonic()
    settled = wait_until(back_to_baseline, result_ttl + 90, 1.0)
    r.metrics["back_to_baseline_after_s"] = round(time.monotonic() - expired_at, 1)
    left = sorted(k for k in _keys(client) if k not in baseline)
    r.check(
        "Redis key count back to baseline (+ the queue's fixed index keys) once retention expired",
        settled,
        f"baseline {len(baseline)} keys; left over: {[k.decode() for k in left][:10]}",
    )
    no_ttl = [
        k.decode()
        for k in _keys(client)
        if client.ttl(k) == -1 and k not in fixed_b and k not in baseline
    ]
    r.check("no key without a TTL outside the queue's fixed keys", not no_ttl, no_ttl[:10])
    xlen = client.xlen(keys.events)
    r.check("events stream bounded (MAXLEN ~ 10,000)", xlen <= 11_000, xlen)
    stale = client.zcard(keys.completed)
    r.metrics.update(stale_ids_in_completed_index=stale, events_len=xlen)
    # O3b: the reaper reaps again while its sweep leaves expired ids behind, so the
    # index is clean within a few beats (lease / 3 each) of the records expiring
    clean = wait_until(lambda: client.zcard(keys.completed) == 0, lease + 5, 0.2)
    r.check(
        "the completed index holds no expired id a lease after the records expired",
        clean,
        f"{stale} ids when the keys were back to baseline, {client.zcard(keys.completed)} now",
    )
    # worker memory: flat after warm-up
    warm = [s for s in samples if s[1] >= jobs * 0.1]
    if warm:
        start_rss = warm[0][2]
        peak = max(s[2] for s in warm)
        end_rss = samples[-1][2]
        growth = (peak - start_rss) / start_rss
        r.check(
            "worker RSS after warm-up (10 % of the jobs) grows by under 10 %",
            growth < 0.10,
            f"{start_rss} -> peak {peak} KiB (+{growth:.1%}), end {end_rss} KiB",
        )
        r.metrics.update(
            rss_after_warmup_kib=start_rss,
            rss_peak_kib=peak,
            rss_end_kib=end_rss,
            rss_growth=round(growth, 4),
        )
    else:
        r.check("RSS samples after warm-up", False, len(samples))
    finishes = Counter(e.id for e in ledger.read(scene.ledger_path) if e.kind == "finish")
    missing = jobs - len(finishes)
    twice = sum(1 for n in finishes.values() if n > 1)
    r.check("every job ran (ledger)", missing == 0, missing)
    # no fault is injected here: a job whose handler ran to its end twice is a defect
    r.check("0 duplicates: no job ran to its end twice (no fault was injected)", twice == 0, twice)
    r.jobs = jobs
    r.lost = missing
    r.duplicates = twice
    r.metrics.update(
        jobs_per_s=round(jobs / run_s, 1),
        run_s=round(run_s, 1),
        rss_samples=[(round(t, 1), p, k) for t, p, k in samples[:: max(1, len(samples) // 20)]],
    )
    q.close()
    client.close()
    return r


def _worker_id(client, keys: QueueKeys) -> str:  # type: ignore[no-untyped-def]
    ids = client.zrange(keys.workers, 0, -1)
    return ids[0].decode() if ids else ""

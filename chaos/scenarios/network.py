"""Scenarios 9 and 10: a faulty network between clients and Redis, and skewed clocks."""

from __future__ import annotations

import json
import threading
import time

from chaos import ledger
from chaos.checker import Result, tally
from chaos.harness import Enqueue, Scene, admin, drained, settings, unhandled_tracebacks, wait_until
from chaos.proxy import FaultProxy
from chaos.scenarios import scenario
from conveyor.protocol.keys import QueueKeys


@scenario(
    9,
    "network-faults",
    "A TCP proxy between every client and Redis injects resets, latency and stalls",
    full=dict(jobs=4_000, window=20.0, lease=2.0, workers=2, concurrency=8, long_stall=3.0),
    bounded=dict(jobs=800, window=8.0, lease=2.0, workers=2, concurrency=8, long_stall=3.0),
)
def network_faults(
    scene: Scene,
    *,
    jobs: int,
    window: float,
    lease: float,
    workers: int,
    concurrency: int,
    long_stall: float,
) -> Result:
    r = Result("network-faults")
    server = scene.server()
    assert server.port is not None
    proxy = FaultProxy(server.port, seed=scene.seed)
    proxy.start()
    try:
        url = proxy.url
        pool = scene.workers(url, workers, concurrency=concurrency, lease=lease)
        pool.start()
        r.check("workers ready through the proxy", pool.wait_ready(20))
        producer = scene.producer(url)
        rng = scene.rng
        specs = [
            Enqueue(f"j{n:05d}", "work", {"s": round(rng.uniform(0.01, 0.05), 3)})
            for n in range(jobs)
        ]
        feeder = threading.Thread(
            target=producer.stream, args=(specs,), kwargs={"seconds": window * 0.9, "batch": 5}
        )
        proxy.set_latency(0.001, 0.010)
        feeder.start()
        t0 = time.monotonic()
        faults: list[tuple[float, str]] = []
        long_done = False
        kinds = ["reset half", "lose replies", "reset all", "stall", "latency"]
        order: list[str] = []
        for _ in range(int(window / 0.4) + 1):
            time.sleep(rng.uniform(0.4, 1.2))
            now = time.monotonic() - t0
            if now >= window:
                break
            if not order:  # every kind once per round, in a random order
                order = rng.sample(kinds, len(kinds))
            if not long_done and now > window / 2:
                proxy.stall(long_stall)  # longer than a lease: leases may lapse
                faults.append((now, f"stall {long_stall:.1f} s"))
                long_done = True
                time.sleep(long_stall)
                continue
            kind = order.pop()
            if kind == "reset half":
                faults.append((now, f"reset {proxy.reset(0.5)} connections"))
            elif kind == "reset all":
                faults.append((now, f"reset all {proxy.reset(1.0)} connections"))
            elif kind == "lose replies":
                proxy.lose_replies(0.05)
                time.sleep(1.0)
                proxy.lose_replies(0.0)
                faults.append((now, "lose 5% of replies for 1 s"))
            elif kind == "stall":
                proxy.stall(0.5)
                faults.append((now, "stall 0.5 s"))
            else:
                proxy.set_latency(0.02, 0.08)
                faults.append((now, "latency 20-80 ms for 1 s"))
                time.sleep(1.0)
                proxy.set_latency(0.001, 0.010)
        proxy.set_latency(0.0, 0.0)
        feeder.join(timeout=window + 120)
        client = admin(server.url)  # the harness reads Redis directly
        done = wait_until(drained(client, "chaos", jobs), 60, 0.1)
        r.check("all jobs finished", done)
        entries = list(ledger.read(scene.ledger_path))
        t = tally(entries, client, "chaos")
        r.absorb(t)
        r.kills = len(faults) + proxy.replies_cut
        # each fault (each cut reply counts as one) can take at most every lease all
        # workers hold
        n_faults = len(faults) + proxy.replies_cut
        bound = n_faults * workers * concurrency
        r.check(
            "every enqueue acknowledged in the end (retried with the same id)",
            len(producer.acked) == jobs,
            f"{len(producer.acked)}/{jobs}",
        )
        r.check("0 lost", not t.lost, t.lost[:10])
        r.check("0 unexpected", not t.unexpected, t.unexpected[:10])
        r.check("0 completions accepted twice", not t.double_acks, t.double_acks[:10])
        r.check(
            f"duplicates <= faults x workers x concurrency = {bound}",
            len(t.duplicates) <= bound,
            len(t.duplicates),
        )
        r.check(f"re-runs <= {bound}", len(t.reruns) <= bound, len(t.reruns))
        unsure = {e.id for e in entries if e.kind == "unsure"}
        multi = sorted(j for j in unsure if len(t.starts.get(j, [])) > 1)
        r.metrics["unsure_enqueues_run_twice"] = multi
        r.check("workers survived", len(pool.live()) == workers)
        tracebacks = unhandled_tracebacks(pool.logs())
        r.check("no unhandled exception in the worker logs", not tracebacks, tracebacks[:3])
        r.metrics.update(
            faults=[f"{t_:.1f}s {what}" for t_, what in faults],
            resets=proxy.resets,
            replies_cut=proxy.replies_cut,
            proxy_connections=proxy.connections,
            producer_errors=len(producer.errors),
            unsure_enqueues=len(unsure),
            reruns=len(t.reruns),
        )
        pool.stop()
        _idle_reset(scene, r, proxy)
        _uncertain_enqueue_retry(scene, r, server.url, proxy)
        client.close()
    finally:
        proxy.stop()
    return r


def _idle_reset(scene: Scene, r: Result, proxy: FaultProxy) -> None:
    """Deterministic: idle workers (blocked on Redis) have every connection reset under them.
    They must reconnect and log a warning, not an unhandled exception."""
    pool = scene.workers(proxy.url, 2, queue="idle", concurrency=4)
    pool.start()
    pool.wait_ready(20)
    time.sleep(1.0)  # both are blocked waiting for work now
    resets = 0
    for _ in range(3):  # reset them while they block, three times over
        resets += proxy.reset(1.0)
        time.sleep(1.0)
    # then real work: enough allocation for the garbage collector to run (an unretrieved
    # future's exception is only logged when the future is collected)
    producer = scene.producer(proxy.url, queue="idle")
    producer.send_until_acked([Enqueue(f"idle{i}", "work", {"s": 0}) for i in range(500)], 10)
    client = admin(f"redis://127.0.0.1:{proxy.upstream_port}/0")
    served = wait_until(drained(client, "idle", 500), 20)
    client.close()
    logs = pool.logs()
    bad = [line for line in logs.splitlines() if "never retrieved" in line]
    bad += unhandled_tracebacks(logs)
    r.check(
        "idle workers whose connections are reset: they serve on, and log no unhandled exception",
        served and not bad and len(pool.live()) == 2,
        f"{resets} connections reset; served={served}; {bad[:2]}",
    )
    pool.stop()


def _runs(scene: Scene, job_id: str) -> int:
    return sum(1 for e in ledger.read(scene.ledger_path) if e.kind == "start" and e.id == job_id)


def _uncertain_enqueue_retry(scene: Scene, r: Result, direct_url: str, proxy: FaultProxy) -> None:
    """Deterministic, two probes of an enqueue whose reply is lost while a worker (talking to
    Redis directly) picks the job up at once:
    1. the reply comes back within the client's own re-sends: the call succeeds and the job
       runs once (the re-send carries the same request id);
    2. it does not: UncertainWriteError reaches the caller, who enqueues again (a new call)
       while the job runs. The contract (errors.UncertainWriteError): the re-send waits as the
       job's blocked twin and runs once more after. Exactly once more, no more."""
    from conveyor import Queue
    from conveyor.errors import UncertainWriteError

    pool = scene.workers(direct_url, 1, queue="retry", concurrency=1)
    pool.start()
    pool.wait_ready(20)
    client = admin(direct_url)
    q = Queue("retry", url=proxy.url, settings=settings())
    # a first enqueue loads the script this client runs (a lost NOSCRIPT reply would make
    # the probes meaningless: nothing applied)
    q.enqueue("work", {"s": 0}, id="warm-up")

    def settled() -> bool:
        return not client.zcard("conveyor:{retry}:ready") and not client.zcard(
            "conveyor:{retry}:active"
        )

    wait_until(settled, 10)
    # 1. replies lost for 0.2 s: the client's own re-sends (0.05, 0.25, 1.0 s) get through
    proxy.lose_replies(1.0)
    threading.Timer(0.2, proxy.lose_replies, args=(0.0,)).start()
    try:
        outcome = q.enqueue("work", {"s": 1.0}, id="resent").outcome
    except Exception as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    time.sleep(0.3)
    wait_until(settled, 15)
    time.sleep(1.0)
    runs = _runs(scene, "resent")
    r.check(
        "an enqueue whose reply is lost for 0.2 s: the client re-sends it itself, the call "
        "succeeds, the job runs once",
        outcome in ("created", "exists") and runs == 1,
        f"outcome {outcome!r}; runs: {runs}",
    )
    r.metrics["client_resend"] = {"outcome": outcome, "runs": runs}
    # 2. replies lost for good: the caller gets UncertainWriteError and enqueues again
    proxy.lose_replies(1.0)
    try:
        q.enqueue("work", {"s": 1.5}, id="retried")
        first = "acknowledged"
    except UncertainWriteError:
        first = "UncertainWriteError"
    except Exception as exc:
        first = type(exc).__name__
    finally:
        proxy.lose_replies(0.0)
    running = wait_until(lambda: _runs(scene, "retried") > 0, 10)
    again = q.enqueue("work", {"s": 1.5}, id="retried").outcome if running else "not started"
    wait_until(settled, 15)
    time.sleep(1.0)
    runs = _runs(scene, "retried")
    r.check(
        "UncertainWriteError, then the caller enqueues again while the job runs: as documented, "
        "one blocked twin, so exactly one more run",
        first == "UncertainWriteError" and again == "blocked" and runs == 2,
        f"first call: {first}; re-send: {again!r}; runs: {runs}",
    )
    r.metrics["caller_resend"] = {"first": first, "resend_outcome": again, "runs": runs}
    q.close()
    client.close()
    pool.stop()


_SKEWED_PRODUCER = """
import sys, time
sys.path[:0] = {paths!r}
from chaos.ledger import Ledger
from conveyor import Queue
q = Queue("chaos", url={url!r})
with Ledger({ledger!r}) as led:
    for i in range({count}):
        job_id = f"skewprod{{i}}"
        q.enqueue("work", {{"s": 0}}, id=job_id, delay={delay})
        led.record("enq", job_id, 0, "delay={delay}")
print("clock says", time.time())
"""


@scenario(
    10,
    "clock-skew",
    "Workers with their clocks +120 s and -120 s off (libfaketime): no early re-runs, no "
    "early or late delayed jobs",
    full=dict(normal=400, long=4, delayed=12, retried=4, skewed_produced=4, lease=2.0, skew=120),
    bounded=dict(normal=100, long=2, delayed=6, retried=2, skewed_produced=2, lease=2.0, skew=120),
)
def clock_skew(
    scene: Scene,
    *,
    normal: int,
    long: int,
    delayed: int,
    retried: int,
    skewed_produced: int,
    lease: float,
    skew: int,
) -> Result:
    import os
    import subprocess
    import sys

    from chaos.harness import FAKETIME_LIB, ROOT

    r = Result("clock-skew")
    if not FAKETIME_LIB.exists():
        r.check("libfaketime installed (apt-get install -y faketime)", False, FAKETIME_LIB)
        return r
    url = scene.server().url
    pool = scene.workers(url, 2, concurrency=6, lease=lease, faketime=[f"+{skew}s", f"-{skew}s"])
    before = time.time()
    pool.start()
    r.check("skewed workers ready", pool.wait_ready(20))
    after = time.time()
    # each worker announces its start time, read from its own (skewed) clock; it started
    # between `before` and `after` (a slow start-up took 5 s here once), so its skew lies
    # between started_at - after and started_at - before
    client = admin(url)
    keys = QueueKeys("conveyor", "chaos")
    clocks: dict[int, tuple[int, int]] = {}
    ids = [w.decode() for w in client.zrange(keys.workers, 0, -1)]
    for raw in client.mget([keys.worker(w) for w in ids]) if ids else []:
        if raw:
            info = json.loads(raw)
            clocks[info["pid"]] = (
                round(info["started_at"] - after),
                round(info["started_at"] - before),
            )
    spans = sorted(clocks.values())
    r.check(
        f"the workers' clocks really are {skew} s ahead and behind (within 2 s of their start)",
        len(spans) == 2
        and spans[0][0] - 2 <= -skew <= spans[0][1] + 2
        and spans[1][0] - 2 <= skew <= spans[1][1] + 2,
        clocks,
    )
    producer = scene.producer(url)
    rng = scene.rng
    jobs = [Enqueue(f"long{i}", "work", {"s": 3 * lease}) for i in range(long)]
    jobs += [Enqueue(f"n{i:04d}", "work", {"s": 0.02}) for i in range(normal)]
    jobs += [Enqueue(f"retry{i}", "work", {"retry_in": 2.0}) for i in range(retried)]
    delays = {f"delay{i}": round(rng.uniform(2.0, 4.0), 2) for i in range(delayed)}
    producer.send_until_acked(jobs, 10)
    for job_id, d in delays.items():
        producer.send_until_acked([Enqueue(job_id, "work", {"s": 0}, {"delay": d})], 10)
    # a producer with a skewed clock: `delay=` is relative, so it must not matter
    env = dict(
        os.environ, LD_PRELOAD=str(FAKETIME_LIB), FAKETIME=f"+{skew}s", DONT_FAKE_MONOTONIC="1"
    )
    code = _SKEWED_PRODUCER.format(
        paths=[str(ROOT)], url=url, ledger=str(scene.ledger_path), count=skewed_produced, delay=3.0
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, timeout=60, text=True
    )
    r.check("the skewed producer ran", out.returncode == 0, (out.stdout + out.stderr)[-300:])
    total = len(jobs) + delayed + skewed_produced
    done = wait_until(drained(client, "chaos", total), 30, 0.1)
    r.check("all jobs finished", done)
    entries = list(ledger.read(scene.ledger_path))
    t = tally(entries, client, "chaos")
    r.absorb(t)
    r.check("0 lost", not t.lost, t.lost[:10])
    long_runs = {j.id: len(t.starts.get(j.id, [])) for j in jobs if j.id.startswith("long")}
    r.check(
        f"jobs running {3 * lease:.0f} s (3 leases) on skewed workers: no re-run",
        all(n == 1 for n in long_runs.values()),
        long_runs,
    )
    others = [j for j in t.reruns if not j.startswith("retry")]
    r.check("no job re-run at all (nothing judged by a worker's clock)", not others, others[:10])
    lateness = {}
    for job_id in [*delays, *(f"skewprod{i}" for i in range(skewed_produced))]:
        want = delays.get(job_id, 3.0)
        enq = t.acked_at.get(job_id)
        runs = t.starts.get(job_id, [])
        if enq and runs:
            lateness[job_id] = round(min(e.mono for e in runs) - enq.mono - want, 3)
    early = {k: v for k, v in lateness.items() if v < -0.05}
    late = {k: v for k, v in lateness.items() if v > 1.0}
    r.check(
        "delayed jobs (producer with a true clock and with a +120 s clock): none early",
        len(lateness) == delayed + skewed_produced and not early,
        early or lateness,
    )
    r.check("... and none more than 1 s late", not late, late)
    gaps = {}
    for i in range(retried):
        runs = sorted(t.starts.get(f"retry{i}", []), key=lambda e: e.mono)
        if len(runs) >= 2:
            gaps[f"retry{i}"] = round(runs[1].mono - runs[0].mono, 3)
    r.check(
        "retry_at computed on a skewed worker's clock: the retry runs 2 s later (+/- 1 s)",
        len(gaps) == retried and all(1.95 <= g <= 3.0 for g in gaps.values()),
        gaps,
    )
    r.metrics.update(
        worker_clock_offsets_s=clocks,
        delayed_lateness_s=lateness,
        retry_gaps_s=gaps,
        max_lateness_s=max(lateness.values(), default=None),
    )
    r.kills = 0
    client.close()
    return r

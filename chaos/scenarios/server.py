"""Scenarios 8, 11, 12: the Redis server goes away, stalls, runs out of memory or evicts
(6 and 7, a crash that loses the AOF's tail, are in aof.py)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import redis

from chaos import ledger
from chaos.checker import Result, tally
from chaos.harness import Enqueue, Scene, admin, drained, wait_until
from chaos.scenarios import scenario
from conveyor import Queue, QueueSettings
from conveyor.client.core import RESEND_DELAYS
from conveyor.errors import EvictionPolicyError, OutOfMemoryError
from conveyor.protocol.keys import QueueKeys


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@scenario(
    12,
    "maxmemory",
    "maxmemory with noeviction: enqueue fails fast and typed, running jobs complete; "
    "other eviction policies refused or warned about",
    full=dict(running=8, maxmemory="16mb", lease=2.0),
    bounded=dict(running=4, maxmemory="16mb", lease=2.0),
)
def maxmemory(scene: Scene, *, running: int, maxmemory: str, lease: float) -> Result:
    r = Result("maxmemory")
    server = scene.server(extra_args=["--maxmemory", maxmemory, "--maxmemory-policy", "noeviction"])
    url = server.url
    client = admin(url)
    pool = scene.workers(url, 1, concurrency=running, lease=lease)
    pool.start()
    r.check("worker ready", pool.wait_ready(20))
    producer = scene.producer(url)
    # long enough to live through 2 leases of a full Redis and finish after it has room again
    longs = [Enqueue(f"long{i}", "work", {"s": 5 * lease}) for i in range(running)]
    producer.send_until_acked(longs, 10)
    started = wait_until(
        lambda: len({e.id for e in ledger.read(scene.ledger_path) if e.kind == "start"}) >= running,
        10,
    )
    r.check(f"{running} jobs running on worker A", started)
    idle = scene.workers(url, 1, concurrency=2, lease=lease)  # B: would reap and re-run them
    idle.start()
    r.check("idle worker B ready", idle.wait_ready(20))
    # fill Redis (keys outside the queue) until it refuses writes
    # (big values first, then small ones, so no slack is left below the limit)
    filled = 0
    refusals = []
    for size in (256 * 1024, 4 * 1024, 64):
        for _ in range(5_000):
            try:
                client.set(f"filler:{filled}", b"x" * size)
                filled += 1
            except redis.ResponseError as exc:
                refusals.append(f"{type(exc).__name__}: {exc}")
                break
    r.check("Redis reached maxmemory (plain SETs refused)", len(refusals) == 3, refusals[:1])
    # and below: the limit a little under what is used, so Redis stays unambiguously full
    client.config_set("maxmemory", client.info("memory")["used_memory"] - 1024 * 1024)
    info = client.info("memory")
    r.metrics.update(
        filler_keys=filled, used_memory=info["used_memory"], maxmemory=info["maxmemory"]
    )
    q = producer.queue
    timings = []
    for i in range(20):
        t0 = time.monotonic()
        try:
            q.enqueue("work", {"s": 0}, id=f"oom{i}")
            outcome = "accepted"
        except OutOfMemoryError:
            outcome = "OutOfMemoryError"
        except Exception as exc:
            outcome = f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
        timings.append(time.monotonic() - t0)
        if outcome != "OutOfMemoryError":
            break
    r.check("enqueue raises OutOfMemoryError every time", outcome == "OutOfMemoryError", outcome)
    r.check(
        "... fast: every refusal under 100 ms",
        max(timings) < 0.1,
        f"max {max(timings) * 1000:.1f} ms",
    )
    r.check("... and it is an error, not a silent accept", outcome != "accepted", outcome)
    try:
        q.enqueue_many([("work", {"s": 0}) for _ in range(50)])
        many = "accepted"
    except OutOfMemoryError:
        many = "OutOfMemoryError"
    except Exception as exc:
        many = f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
    r.check("enqueue_many raises OutOfMemoryError", many == "OutOfMemoryError", many)
    keys = QueueKeys("conveyor", "chaos")
    r.check(
        "nothing of the refused jobs was written",
        not any(client.exists(keys.job(f"oom{i}")) for i in range(20)),
    )
    # stay full for two leases while the jobs run, then make room again
    time.sleep(2 * lease + 0.5)
    for n in range(filled):
        client.delete(f"filler:{n}")
    client.config_set("maxmemory", maxmemory)
    done = wait_until(
        lambda: all(client.hget(keys.job(j.id), "state") == b"completed" for j in longs),
        6 * lease + 10,
    )
    r.check("the jobs running while Redis was full completed", done)
    t = tally(list(ledger.read(scene.ledger_path)), client, "chaos", ids=[j.id for j in longs])
    logs = pool.logs() + idle.logs()
    beats_failed = logs.count("heartbeat failed")
    r.check(
        "... each ran once (no lease lapsed and was reaped while Redis was full)",
        not t.reruns,
        f"{len(t.reruns)} of {running} re-run; {beats_failed} failed heartbeats",
    )
    r.metrics.update(heartbeats_failed=beats_failed, oom_refusal_type=outcome.split(":")[0])
    r.absorb(t)
    # room again: enqueue works, without restarting anything
    try:
        q.enqueue("work", {"s": 0}, id="after")
        after = "accepted"
    except Exception as exc:
        after = type(exc).__name__
    r.check(
        "after memory is freed, enqueue works again and the job runs",
        after == "accepted"
        and wait_until(lambda: client.hget(keys.job("after"), "state") == b"completed", 10),
        after,
    )
    r.metrics["refusal_ms_max"] = round(max(timings) * 1000, 2)
    pool.stop()
    idle.stop()
    client.close()

    # a policy that evicts: refused by default, a warning when configured so
    lru = scene.server(extra_args=["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"])
    try:
        Queue("chaos", url=lru.url).enqueue("work", 1)
        refused = "accepted"
    except EvictionPolicyError as exc:
        refused = f"EvictionPolicyError: {exc}"
    r.check(
        "allkeys-lru: enqueue refused with EvictionPolicyError (default)",
        refused.startswith("EvictionPolicyError"),
        refused[:120],
    )
    capture = _Capture()
    logging.getLogger("conveyor").addHandler(capture)
    try:
        warn_q = Queue("chaos", url=lru.url, settings=QueueSettings(eviction_check="warn"))
        warned = warn_q.enqueue("work", 1).outcome
        warn_q.close()
    finally:
        logging.getLogger("conveyor").removeHandler(capture)
    r.check(
        "allkeys-lru with eviction_check='warn': accepted, and a warning logged",
        warned == "created" and any("maxmemory-policy" in m for m in capture.messages),
        capture.messages[:1],
    )
    strict = scene.workers(lru.url, 1)
    strict.start()
    proc = strict.procs[0]
    assert proc is not None
    exited = wait_until(lambda: not proc.alive, 15)
    out = proc.log_path.read_text(errors="replace")
    r.check(
        "allkeys-lru: a worker refuses to start, with a clear error",
        exited and proc.popen.returncode != 0 and "maxmemory-policy" in out,
        f"exit {proc.popen.returncode}: " + (out.strip().splitlines() or [""])[-1][:160],
    )
    lenient = scene.workers(lru.url, 1, env={"CHAOS_EVICTION": "warn"})
    lenient.start()
    lru_client = admin(lru.url)
    ran = wait_until(lambda: lru_client.zcard(keys.completed) >= 1, 15)
    r.check(
        "allkeys-lru with eviction_check='warn': the worker warns and runs jobs",
        ran and "maxmemory-policy" in lenient.logs(),
    )
    lru_client.close()
    r.jobs = running
    return r


def _log_times(text: str, needle: str) -> list[float]:
    """Seconds-of-day of the log lines containing `needle` (the CLI's asctime format)."""
    out = []
    for line in text.splitlines():
        if needle in line and line[:4].isdigit():
            hms = line[11:23]  # HH:MM:SS,mmm
            try:
                h, m, rest = hms.split(":")
                out.append(int(h) * 3600 + int(m) * 60 + float(rest.replace(",", ".")))
            except ValueError:
                continue
    return out


@scenario(
    8,
    "redis-down",
    "Redis down at start and for 30 s mid-run: typed fast failures, backoff with jitter, 0 lost",
    full=dict(down_at_start=5.0, outage=30.0, jobs=3_000, window=45.0, lease=2.0),
    bounded=dict(down_at_start=2.0, outage=6.0, jobs=600, window=10.0, lease=2.0),
)
def redis_down(
    scene: Scene, *, down_at_start: float, outage: float, jobs: int, window: float, lease: float
) -> Result:
    from conveyor.errors import ConnectionLostError

    r = Result("redis-down")
    server = scene.server(appendonly=True, appendfsync="always", start=False)
    url = server.url
    pool = scene.workers(url, 2, concurrency=8, lease=lease)
    pool.start()
    producer = scene.producer(url)
    # 1. nothing listens yet: producer calls fail fast and typed
    calls = []
    for i in range(5):
        t0 = time.monotonic()
        try:
            producer.queue.enqueue("work", {}, id=f"early{i}")
            calls.append(("accepted", 0.0))
        except ConnectionLostError as exc:
            calls.append((type(exc).__name__, time.monotonic() - t0))
        except Exception as exc:
            calls.append((f"{type(exc).__module__}.{type(exc).__name__}", time.monotonic() - t0))
    r.check(
        "Redis down at start: enqueue raises ConnectionLostError",
        all(kind == "ConnectionLostError" for kind, _ in calls),
        calls,
    )
    r.check(
        "... within 100 ms",
        max(s for _, s in calls) < 0.1,
        f"max {max(s for _, s in calls) * 1000:.1f} ms",
    )
    time.sleep(down_at_start)
    r.check("workers waited (still running) while Redis was down", len(pool.live()) == 2)
    started_at = time.monotonic()
    server.start()
    ready = pool.wait_ready(20)
    r.check("workers connected once Redis came up", ready, f"{time.monotonic() - started_at:.1f} s")
    r.metrics["connect_after_start_s"] = round(time.monotonic() - started_at, 2)
    # 2. an outage mid-run
    rng = scene.rng
    specs = [
        Enqueue(f"j{n:05d}", "work", {"s": round(rng.uniform(0.01, 0.05), 3)}) for n in range(jobs)
    ]
    feeder = threading.Thread(
        target=producer.stream, args=(specs,),
        kwargs={"seconds": window, "batch": 5, "retry_for": outage + 30},
    )  # fmt: skip
    feeder.start()
    time.sleep(window * 0.3)
    killed_at = time.monotonic()
    server.kill()
    scene.ledger.record("kill", "redis", 0, "SIGKILL")
    time.sleep(outage)
    server.start()
    back_at = time.monotonic()
    feeder.join(timeout=window + outage + 60)
    client = admin(url)
    done = wait_until(drained(client, "chaos", jobs), 60, 0.1)
    r.check("all jobs finished", done)
    entries = list(ledger.read(scene.ledger_path))
    t = tally(entries, client, "chaos", ids=[s.id for s in specs])
    r.absorb(t)
    r.kills = 2
    finishes = sorted(min(f.mono for f in fs) for fs in t.finishes.values())
    resumed = next((m for m in finishes if m > back_at), None)
    r.max_recovery_s = None if resumed is None else resumed - back_at
    during = [e for e in producer.errors if killed_at <= e[0] <= back_at]
    r.check("0 lost", not t.lost, t.lost[:10])
    r.check("0 unexpected", not t.unexpected, t.unexpected[:10])
    r.check("0 completions accepted twice", not t.double_acks, t.double_acks[:10])
    r.check(
        "outage: every producer call failed with a ConnectionLostError",
        bool(during)
        and all(kind in ("ConnectionLostError", "UncertainWriteError") for _, kind, _ in during),
        sorted({kind for _, kind, _ in during}),
    )
    # A call that could not connect knows nothing was applied: it must fail at once. A call whose
    # reply was lost (its pooled connection died under it) may have been applied: it re-sends
    # (RESEND_DELAYS, 1.3 s in all) to settle that, then raises UncertainWriteError.
    slow = [round(s, 3) for _, kind, s in during if kind == "ConnectionLostError" and s >= 0.1]
    r.check("outage: ... each call that could not connect failed within 100 ms", not slow, slow[:5])
    doubt_bound = sum(RESEND_DELAYS) + 0.5
    slow_doubts = [
        round(s, 3) for _, kind, s in during if kind == "UncertainWriteError" and s >= doubt_bound
    ]
    r.check(
        f"outage: ... each call in doubt gave up within its re-sends + 0.5 s = {doubt_bound} s",
        not slow_doubts,
        slow_doubts[:5],
    )
    r.metrics["outage_calls"] = {
        kind: sum(1 for _, k, _ in during if k == kind)
        for kind in ("ConnectionLostError", "UncertainWriteError")
    }
    r.check(
        "workers resumed within 5 s (the backoff cap) + jitter of Redis coming back",
        r.max_recovery_s is not None and r.max_recovery_s <= 10.5,
        r.max_recovery_s,
    )
    r.check("both workers survived the outage", len(pool.live()) == 2)
    # 3. backoff: how often each worker retried while Redis was away
    retries: dict[str, Any] = {}
    spread_ok = True
    for p in pool.all_procs:
        text = p.log_path.read_text(errors="replace")
        claim = _log_times(text, "could not claim jobs")
        beats = _log_times(text, "could not send the heartbeat")
        gaps = [round(b - a, 2) for a, b in zip(claim, claim[1:], strict=False)]
        retries[p.log_path.name] = {"claim_retries": len(claim), "claim_gaps_s": gaps[-6:],
                                    "heartbeat_failures": len(beats)}  # fmt: skip
        late = [g for g in gaps if g >= 2.5]  # the capped part: 5 s x (1 + jitter)
        if len(late) >= 3 and max(late) - min(late) < 0.2:
            spread_ok = False
    bound = 8 + outage / 2.5
    worst = max(v["claim_retries"] for v in retries.values())
    r.check(
        f"workers backed off: at most {bound:.0f} claim retries each during the outage",
        worst <= bound,
        worst,
    )
    r.check("retry gaps are jittered (not a fixed period)", spread_ok)
    r.metrics.update(
        retries=retries,
        outage_s=outage,
        producer_errors=len(producer.errors),
        unsure=producer.unsure,
        resume_s=r.max_recovery_s,
    )
    client.close()
    return r


@scenario(
    11,
    "server-stall",
    "DEBUG SLEEP and CLIENT PAUSE (2 leases each) on the server: no loss; no re-runs under "
    "CLIENT PAUSE",
    full=dict(jobs=1_500, window=12.0, stall=4.0, lease=2.0, workers=2, concurrency=8),
    bounded=dict(jobs=250, window=5.0, stall=4.0, lease=2.0, workers=2, concurrency=8),
)
def server_stall(
    scene: Scene,
    *,
    jobs: int,
    window: float,
    stall: float,
    lease: float,
    workers: int,
    concurrency: int,
) -> Result:
    r = Result("server-stall")
    server = scene.server(extra_args=["--enable-debug-command", "local"])
    url = server.url
    rng = scene.rng
    client = admin(url, socket_timeout=stall + 10)
    for phase in ("pause", "sleep"):
        pool = scene.workers(url, workers, queue=phase, concurrency=concurrency, lease=lease)
        pool.start()
        r.check(f"{phase}: workers ready", pool.wait_ready(20))
        producer = scene.producer(url, queue=phase)
        specs = [
            Enqueue(f"{phase}{n:05d}", "work", {"s": round(rng.uniform(0.2, 0.5), 3)})
            for n in range(jobs)
        ]
        feeder = threading.Thread(
            target=producer.stream, args=(specs,), kwargs={"seconds": window, "batch": 5}
        )
        feeder.start()
        time.sleep(window * 0.4)
        running = client.zcard(QueueKeys("conveyor", phase).active)
        t0 = time.monotonic()
        scene.ledger.record("stall", phase, 0, stall)
        if phase == "pause":
            client.execute_command("CLIENT", "PAUSE", int(stall * 1000), "WRITE")
            time.sleep(stall)
        else:
            client.execute_command("DEBUG", "SLEEP", stall)
        stall_end = time.monotonic()
        feeder.join(timeout=window + 60)
        done = wait_until(drained(client, phase, jobs), 60, 0.1)
        r.check(f"{phase}: all jobs finished", done)
        t = tally(list(ledger.read(scene.ledger_path)), client, phase, ids=[s.id for s in specs])
        r.absorb(t)
        r.check(f"{phase}: 0 lost", not t.lost, t.lost[:10])
        r.check(f"{phase}: 0 completions accepted twice", not t.double_acks, t.double_acks[:10])
        r.check(f"{phase}: workers survived", len(pool.live()) == workers)
        if phase == "pause":
            # Every reaper is paused too, but this is not 0 by construction: when the pause
            # ends the leases have expired on Redis's clock, and each worker's queued beat
            # runs before any reap only renews them because heartbeat.lua renews an expired
            # lease no reaper took yet (a heartbeat that refused expired leases: 12 re-runs)
            r.check(
                f"CLIENT PAUSE {stall:.0f} s WRITE ({running} jobs running): 0 re-runs (each "
                "expired lease renewed by the beat queued in the pause)",
                not t.reruns,
                f"{len(t.reruns)} re-run",
            )
        else:
            bound = workers * concurrency
            r.check(
                f"DEBUG SLEEP {stall:.0f} s ({running} jobs running): re-runs <= workers x "
                f"concurrency = {bound}",
                len(t.reruns) <= bound,
                f"{len(t.reruns)} re-run",
            )
            r.check("DEBUG SLEEP: every re-run has attempt >= 2", not t.bad_rerun_attempts)
        r.metrics[f"{phase}_running_at_stall"] = running
        r.metrics[f"{phase}_reruns"] = len(t.reruns)
        r.metrics[f"{phase}_stall_s"] = round(stall_end - t0, 2)
        r.metrics[f"{phase}_timeouts_in_logs"] = pool.logs().count("Timeout reading")
        pool.stop()
    r.kills = 2
    client.close()
    return r

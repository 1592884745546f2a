"""Scenarios 19-21 and 23: a worker partitioned past its lease while another works, a producer SIGKILLed inside enqueue_many, Redis
restarted again and again under load, and 100 producer processes upserting the same 10 ids
while a worker is killed. (Scenario 22, the memory hog, is in `memory.py`.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any

from chaos import ledger
from chaos.checker import Result, events, stalled_at, tally
from chaos.harness import ROOT, Enqueue, Scene, admin, drained, settings, wait_until
from chaos.proxy import FaultProxy
from chaos.races import after_a_stall, clashing, race, run_spans
from chaos.scenarios import scenario
from conveyor import JobRequest, Queue
from conveyor.protocol.keys import QueueKeys


def _started_of(scene: Scene, pid: int, ids: set[str]) -> set[str]:
    """Which of `ids` the process `pid` has started (the ledger)."""
    return {
        e.id
        for e in ledger.read(scene.ledger_path)
        if e.kind == "start" and e.pid == pid and e.id in ids
    }


# --------------------------------------------------------------------------- 19


@scenario(
    19,
    "worker-partition",
    "One worker cut off from Redis (its own proxy stalls) for longer than its lease while "
    "another works: one completion accepted per job, the cut-off worker's late writes refused",
    full=dict(rounds=4, jobs=8, lease=1.5, partition=5.0),
    bounded=dict(rounds=1, jobs=8, lease=1.5, partition=4.5),
)
def worker_partition(
    scene: Scene, *, rounds: int, jobs: int, lease: float, partition: float
) -> Result:
    r = Result("worker-partition")
    server = scene.server()
    assert server.port is not None
    proxy = FaultProxy(server.port, seed=scene.seed)
    proxy.start()
    try:
        cut = scene.workers(proxy.url, 1, concurrency=4, lease=lease)
        healthy = scene.workers(server.url, 1, concurrency=4, lease=lease)
        cut.start()
        healthy.start()
        r.check("both workers ready", cut.wait_ready(20) and healthy.wait_ready(20))
        producer = scene.producer(server.url)
        cut_proc = cut.procs[0]
        assert cut_proc is not None
        held: list[str] = []  # jobs the cut-off worker was running when it was cut off
        ids: list[str] = []
        run_s = 0.5  # ends during the partition: its outcome waits there while the lease lapses
        for n in range(rounds):
            batch = [Enqueue(f"r{n}j{i}", "work", {"s": run_s}) for i in range(jobs)]
            ids += [j.id for j in batch]
            producer.send_until_acked(batch, 10)
            mine = {j.id for j in batch}
            wait_until(lambda ids=mine: _started_of(scene, cut_proc.pid, ids), 10, 0.02)
            started = _started_of(scene, cut_proc.pid, mine)
            proxy.stall(partition)
            scene.ledger.record("kill", "partition", 0, f"stall {partition} s", pid=cut_proc.pid)
            held += sorted(started)
            time.sleep(partition + 1.0)
        client = admin(server.url)
        r.check("all jobs finished", wait_until(drained(client, "chaos", len(ids)), 60, 0.1))
        entries = list(ledger.read(scene.ledger_path))
        t = tally(entries, client, "chaos", ids=ids)
        counts = events(client, "chaos")
        r.absorb(t)
        r.kills = rounds
        late = [
            j for j in held
            if any(f.pid == cut_proc.pid for f in t.finishes.get(j, ()))
        ]  # fmt: skip
        rerun = [j for j in held if len(t.starts.get(j, ())) >= 2]
        # the result names the run that wrote it: the cut-off run had attempt 1
        results = {j: json.loads(t.view[j].result or "{}").get("attempt") for j in held}
        refused = cut_proc.log_path.read_text(errors="replace").count(
            "lease lost before its outcome was written"
        )
        r.check("the cut-off worker held jobs when it was cut off", held, held)
        r.check(
            "each of them ran again (its lease lapsed and was reaped; a suspect then runs "
            "alone, on whichever worker is idle first)",
            held and rerun == held,
            f"{len(rerun)}/{len(held)}",
        )
        r.check(
            "the cut-off worker's handlers reached their end during the partition (a late "
            "write was attempted)",
            late,
            f"{len(late)}/{len(held)}",
        )
        r.check(
            "one completion accepted per job (events)",
            all(counts[("completed", j)] == 1 for j in ids),
            {j: counts[("completed", j)] for j in ids if counts[("completed", j)] != 1},
        )
        r.check(
            "the accepted result of each held job is its re-run's (attempt >= 2), never the "
            "cut-off run's",
            all(isinstance(a, int) and a >= 2 for a in results.values()),
            results,
        )
        r.check(
            "the cut-off worker's late writes were refused (and said so)",
            refused >= len(late) > 0,
            f"{refused} refusals logged for {len(late)} late outcomes",
        )
        r.check("0 lost", not t.lost, t.lost)
        r.check("0 completions accepted twice", not t.double_acks, t.double_acks)
        r.check("the cut-off worker is still alive", cut_proc.alive)
        r.metrics.update(
            held_at_cut=len(held), late_outcomes=len(late), refusals_logged=refused,
            partition_s=partition, lease_s=lease,
        )  # fmt: skip
        client.close()
    finally:
        proxy.stop()
    return r


# --------------------------------------------------------------------------- 20

_CHILD = """
import os, sys
from conveyor import JobRequest, Queue
from conveyor.errors import ConveyorError
queue = Queue(os.environ["CHAOS_QUEUE"], url=os.environ["CHAOS_URL"])
queue.check()
prefix, count = sys.argv[1], int(sys.argv[2])
jobs = [JobRequest("work", {"s": 0}, {"id": f"{prefix}{i:06d}"}) for i in range(count)]
print("go", flush=True)
queue.enqueue_many(jobs, chunk_size=200)
print("done", flush=True)
"""


def _kill_inside_enqueue_many(url: str, prefix: str, count: int, delay: float) -> bool:
    """A producer process sends `count` jobs in one enqueue_many; SIGKILL it `delay` s after
    it starts sending. True when it was still sending (it never printed "done")."""
    env = {**os.environ, "CHAOS_URL": url, "CHAOS_QUEUE": "chaos", "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(
        [sys.executable, "-c", _CHILD, prefix, str(count)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True,
    ) as child:  # fmt: skip
        assert child.stdout is not None
        try:
            line = child.stdout.readline()  # "go": the send starts now
            if line.strip() != b"go":
                return False
            time.sleep(delay)
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(10)
            return child.stdout.read().strip() != b"done"
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(5)


@scenario(
    20,
    "producer-killed-in-enqueue-many",
    "A producer SIGKILLed inside enqueue_many while workers run, then the batch re-sent with the "
    "same ids: every job done, no job run twice except a running one the re-send asked for",
    full=dict(count=20_000, attempts=6, workers=2, concurrency=8),
    bounded=dict(count=4_000, attempts=8, workers=2, concurrency=8),
)
def producer_killed(
    scene: Scene, *, count: int, attempts: int, workers: int, concurrency: int
) -> Result:
    r = Result("producer-killed-in-enqueue-many")
    url = scene.server().url
    pool = scene.workers(url, workers, concurrency=concurrency)
    pool.start()
    r.check("workers ready", pool.wait_ready(20))
    client = admin(url)
    keys = QueueKeys("conveyor", "chaos")
    batches: list[tuple[str, int]] = []
    landed: list[tuple[int, int, float]] = []  # (present after the kill, sent, delay)
    delay, early, late = 0.1, 0.0, None  # bisect the send: too early, too late
    for n in range(attempts):
        prefix = f"k{n}-"
        killed = _kill_inside_enqueue_many(url, prefix, count, delay)
        pipe = client.pipeline(transaction=False)
        for i in range(count):
            pipe.exists(keys.job(f"{prefix}{i:06d}"))
        present = sum(pipe.execute())
        scene.ledger.record("kill", "producer", 0, f"SIGKILL in enqueue_many after {delay} s")
        batches.append((prefix, count))
        landed.append((present, count, delay))
        if killed and 0 < present < count:
            break
        if present == 0:
            early = delay
        else:
            late = delay
        delay = delay * 2 if late is None else (early + late) / 2  # aim inside the batch
    mid = [x for x in landed if 0 < x[0] < x[1]]
    r.check("a kill landed inside a batch (some of its jobs in Redis, not all)", mid, landed)
    # the batches re-sent, same ids and data, by a new producer
    producer = Queue("chaos", url=url, settings=settings())
    outcomes: Counter[str] = Counter()
    blocked: set[str] = set()
    for prefix, size in batches:
        jobs = [JobRequest("work", {"s": 0}, {"id": f"{prefix}{i:06d}"}) for i in range(size)]
        done = producer.enqueue_many(jobs, chunk_size=500)
        scene.ledger.record_many("enq", [d.id for d in done])
        outcomes.update(d.outcome for d in done)
        blocked.update(d.id for d in done if d.outcome == "blocked")
    producer.close()
    total = sum(size for _, size in batches)
    r.check("all jobs finished", wait_until(drained(client, "chaos", total), 120, 0.1))
    entries = list(ledger.read(scene.ledger_path))
    t = tally(entries, client, "chaos")
    r.absorb(t)
    r.kills = len(batches)
    extra = sorted(set(t.reruns) - blocked)
    r.check("0 lost", not t.lost, t.lost[:10])
    r.check("0 unexpected", not t.unexpected, t.unexpected[:10])
    r.check("0 completions accepted twice", not t.double_acks, t.double_acks[:10])
    r.check(
        "a job ran twice only when the re-send found it running (a blocked twin, asked for)",
        not extra,
        extra[:10],
    )
    r.metrics.update(attempts=landed, resend_outcomes=dict(outcomes), reruns=len(t.reruns))
    client.close()
    return r


# --------------------------------------------------------------------------- 21


@scenario(
    21,
    "redis-restarts",
    "Redis SIGKILLed and restarted on its files again and again (AOF always) under 4 workers "
    "and a live producer: nothing acknowledged lost",
    full=dict(jobs=6_000, window=24.0, restarts=8, lease=2.0, concurrency=8),
    bounded=dict(jobs=600, window=6.0, restarts=2, lease=2.0, concurrency=4),
)
def redis_restarts(
    scene: Scene, *, jobs: int, window: float, restarts: int, lease: float, concurrency: int
) -> Result:
    r = Result("redis-restarts")
    server = scene.server(
        appendonly=True, appendfsync="always", extra_args=["--aof-load-truncated", "yes"]
    )
    url = server.url
    pool = scene.workers(url, 4, concurrency=concurrency, lease=lease)
    pool.start()
    r.check("4 workers ready", pool.wait_ready(20))
    producer = scene.producer(url)
    rng = scene.rng
    specs = [
        Enqueue(f"j{n:06d}", "work", {"s": round(rng.uniform(0.01, 0.04), 3)}) for n in range(jobs)
    ]
    feeder = threading.Thread(
        target=producer.stream, args=(specs,), kwargs={"seconds": window, "batch": 5}
    )
    feeder.start()
    under_load: list[int] = []
    t0 = previous = time.monotonic()
    for n in range(restarts):
        time.sleep(max(0.0, t0 + (n + 1) * window / (restarts + 1) - time.monotonic()))
        killed_at = time.monotonic()
        # under load: the producer had enqueues acknowledged since the previous restart (it
        # reconnects after each one, which can take most of a second on a loaded machine)
        recent = sum(
            1 for e in ledger.read(scene.ledger_path) if e.kind == "enq" and e.mono > previous
        )
        previous = killed_at
        under_load.append(recent)
        server.kill()
        scene.ledger.record("kill", "redis", 0, "SIGKILL", pid=0)
        time.sleep(rng.uniform(0.1, 0.5))
        server.start()
    feeder.join(timeout=window + 120)
    client = admin(url)
    done = wait_until(drained(client, "chaos", jobs), 90, 0.1)
    r.check("all jobs finished", done)
    entries = list(ledger.read(scene.ledger_path))
    t = tally(entries, client, "chaos")
    r.absorb(t)
    r.kills = restarts
    bound = restarts * 4 * concurrency
    r.check(
        "every restart came under load (enqueues acknowledged since the one before it)",
        all(under_load),
        under_load,
    )
    r.check(
        "every enqueue acknowledged in the end", len(producer.acked) == jobs, len(producer.acked)
    )
    r.check("0 lost", not t.lost, t.lost[:10])
    r.check("0 unexpected", not t.unexpected, t.unexpected[:10])
    r.check("0 completions accepted twice", not t.double_acks, t.double_acks[:10])
    r.check(
        f"duplicates <= restarts x workers x concurrency = {bound}",
        len(t.duplicates) <= bound,
        len(t.duplicates),
    )
    r.check("every re-run has attempt >= 2", not t.bad_rerun_attempts, t.bad_rerun_attempts[:10])
    r.check("all 4 workers outlived the restarts", len(pool.live()) == 4, len(pool.live()))
    r.metrics.update(
        restarts=restarts, acked_since_previous_restart=under_load, reruns=len(t.reruns)
    )
    client.close()
    return r


# --------------------------------------------------------------------------- 23


@scenario(
    23,
    "upsert-storm",
    "100 producer processes upsert the same 10 ids while 3 workers run and one is SIGKILLed: "
    "runs of an id never overlap, and every acknowledged enqueue is followed by a run",
    full=dict(producers=100, ids=10, rounds=5, lease=2.0),
    bounded=dict(producers=100, ids=10, rounds=1, lease=2.0),
)
def upsert_storm(scene: Scene, *, producers: int, ids: int, rounds: int, lease: float) -> Result:
    r = Result("upsert-storm")
    url = scene.server().url
    pool = scene.workers(url, 3, concurrency=4, lease=lease)
    pool.start()
    r.check("3 workers ready", pool.wait_ready(20))
    names = [f"u{i}" for i in range(ids)]
    result: list[Any] = []
    storm = threading.Thread(
        target=lambda: result.append(
            race(url, "chaos", producers, names, {"s": 0.2}, rounds=rounds,
                 ledger_path=str(scene.ledger_path))
        )
    )  # fmt: skip
    storm.start()
    # kill a worker while it runs one of the ids, once the storm is under way
    victim = None
    for _ in range(300):
        running = {e.pid for e in ledger.read(scene.ledger_path) if e.kind == "start"}
        live = [p for p in pool.live() if p.pid in running]
        if live:
            victim = live[0].index
            break
        time.sleep(0.05)
    if victim is not None:
        pool.kill(victim)
        pool.start(victim)
    storm.join(600)
    client = admin(url)
    r.check("all finished", wait_until(drained(client, "chaos", ids), 60, 0.1))
    time.sleep(0.5)
    entries = list(ledger.read(scene.ledger_path))
    t = tally(entries, client, "chaos", ids=names)
    r.absorb(t)
    r.kills = 1 if victim is not None else 0
    got = result[0] if result else None
    outcomes = Counter(got.outcomes if got else [])
    ends = [e for e in entries if e.kind in ("kill", "dead")]
    spans = {j: run_spans(t.starts.get(j, []), t.finishes.get(j, []), ends) for j in names}
    stalls = stalled_at(client, "chaos")
    pairs = {j: clashing(spans[j]) for j in names}
    clashes = {j: [c for c in pairs[j] if not after_a_stall(c, stalls.get(j, []))] for j in names}
    excused = {j: len(pairs[j]) - len(clashes[j]) for j in names if len(pairs[j]) > len(clashes[j])}
    # when the last call that asked for a run (created, updated or blocked; "exists" is the
    # finished record answering) was sent: a run must start after it
    asked = [e for e in entries if e.kind == "enq" and e.extra.split(" ")[0] != "exists"]
    last_ack = {
        j: max((float(e.extra.split(" ")[1]) for e in asked if e.id == j), default=0.0)
        for j in names
    }
    unserved = [
        j for j in names if not any(s.mono > last_ack[j] for s in t.starts.get(j, ()))
    ]  # fmt: skip
    r.check("a worker was killed while running one of the ids", victim is not None)
    r.check(
        f"{producers} processes x {ids} ids x {rounds} rounds: every call answered, no error",
        got is not None
        and got.racers == producers
        and sum(outcomes.values()) == producers * ids * rounds
        and not any(o.startswith("error") for o in outcomes),
        dict(outcomes),
    )
    r.check(
        "the runs of each id never overlapped while both held a lease",
        not any(clashes.values()),
        {j: c for j, c in clashes.items() if c} or {"after a lease expired": excused},
    )
    r.check(
        "every id ran again after its last acknowledged enqueue (no upsert or twin dropped)",
        not unserved,
        unserved,
    )
    r.check("0 lost", not t.lost, t.lost)
    r.check("0 completions accepted twice", not t.double_acks, t.double_acks)
    r.metrics.update(
        outcomes=dict(outcomes),
        runs={j: len(t.starts.get(j, [])) for j in names},
        overlaps_after_a_stall=excused,
    )
    client.close()
    return r

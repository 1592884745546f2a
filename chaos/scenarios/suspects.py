"""Scenario 36: a suspect costs one slot, not a worker. Two workers serve three queues; one
is SIGKILLed while it runs two long jobs, and the fleet restarts it. While the two suspects
re-run (each in a child process of its own), the queues keep the throughput they had before
the kill, nothing is lost, and each suspect runs and ends once."""

from __future__ import annotations

import threading
import time

from chaos import ledger
from chaos.checker import Result, tally
from chaos.harness import Enqueue, Producer, Scene, WorkerPool, admin, drained, wait_until
from chaos.ledger import Entry
from chaos.multi_app import QUEUES
from chaos.scenarios import scenario

SHORT_S = 0.02  # a short job's sleep


class Feeder(threading.Thread):
    """Offers `rate` short jobs per second to each queue, on a fixed cadence."""

    def __init__(self, producers: dict[str, Producer], rate: float) -> None:
        super().__init__(daemon=True)
        self.producers, self.period = producers, 1 / rate
        self.sent: dict[str, list[str]] = {q: [] for q in producers}
        self._halt = threading.Event()

    def run(self) -> None:
        n, start = 0, time.monotonic()
        while not self._halt.is_set():
            for queue, producer in self.producers.items():
                job = Enqueue(f"{queue}-n{n:05d}", "work", {"s": SHORT_S})
                if producer.send([job]):
                    self.sent[queue].append(job.id)
            n += 1
            self._halt.wait(max(0.0, start + n * self.period - time.monotonic()))

    def stop(self) -> None:
        self._halt.set()
        self.join(10)


def _rate(entries: list[Entry], queue: str, begin: float, end: float) -> float:
    """Short jobs of `queue` finished per second in [begin, end)."""
    prefix = f"{queue}-n"
    finished = (e for e in entries if e.kind == "finish" and e.id.startswith(prefix))
    done = sum(1 for e in finished if begin <= e.mono < end)
    return done / (end - begin)


def _pool(scene: Scene, url: str, concurrency: int, lease: float) -> WorkerPool:
    return scene.workers(
        url, 1, queue=QUEUES[0], concurrency=concurrency, lease=lease,
        target="chaos.multi_app:a", args=["--queues", ",".join(QUEUES)],
    )  # fmt: skip


@scenario(
    36,
    "suspects-keep-throughput",
    "A worker killed with two long jobs: their re-runs (suspects) cost one slot each, and "
    "every queue keeps its throughput meanwhile",
    full=dict(concurrency=40, lease=10.0, rate=10.0, before_s=20.0, during_s=30.0, long_s=60.0),
    bounded=dict(concurrency=40, lease=3.0, rate=10.0, before_s=5.0, during_s=5.0, long_s=14.0),
)
def suspects_keep_throughput(
    scene: Scene,
    *,
    concurrency: int,
    lease: float,
    rate: float,
    before_s: float,
    during_s: float,
    long_s: float,
) -> Result:
    r = Result("suspects-keep-throughput")
    url = scene.server().url
    steady, victim = _pool(scene, url, concurrency, lease), _pool(scene, url, concurrency, lease)
    victim.start()
    r.check("the victim worker announced itself", victim.wait_ready(20))
    producers = {q: scene.producer(url, queue=q) for q in QUEUES}
    longs = [Enqueue(f"{QUEUES[0]}-long{i}", "work", {"s": long_s}) for i in range(2)]
    producers[QUEUES[0]].send_until_acked(longs, 10)
    victim_pid = victim.procs[0].pid  # type: ignore[union-attr]

    def starts(attempt: int) -> list[Entry]:
        return [
            e for e in ledger.read(scene.ledger_path)
            if e.kind == "start" and e.id in {j.id for j in longs} and e.attempt == attempt
        ]  # fmt: skip

    r.check(
        "both long jobs started on the victim",
        wait_until(lambda: {e.pid for e in starts(1)} == {victim_pid} and len(starts(1)) == 2, 20),
        starts(1),
    )
    steady.start()
    r.check("the steady worker announced itself", steady.wait_ready(20))
    feeder = Feeder(producers, rate)
    feeder.start()
    fed = time.monotonic()
    time.sleep(1 + before_s)
    killed = time.monotonic()
    victim.kill(0)
    victim.start(0)  # the fleet's supervisor restarts it
    rerun = wait_until(lambda: len(starts(2)) == 2, lease * 3 + 20, 0.1)
    rerun_at = time.monotonic()
    r.check("both suspects re-ran after the kill", rerun, starts(2))
    time.sleep(during_s)
    window_end = time.monotonic()
    feeder.stop()
    entries = list(ledger.read(scene.ledger_path))
    for queue in QUEUES:
        before = _rate(entries, queue, fed + 1, killed)
        during = _rate(entries, queue, rerun_at, window_end)
        ratio = during / before if before else 0.0
        r.metrics[f"{queue}_per_s"] = {"before": round(before, 2), "during": round(during, 2)}
        r.check(
            f"{queue}: while the suspects run, >= 80 % of the throughput before the kill",
            ratio >= 0.8,
            f"{during:.2f}/s against {before:.2f}/s ({ratio:.2f})",
        )
    limit = long_s + lease * 3 + 30
    clients = {q: admin(url, q) for q in QUEUES}
    expected = {q: len(feeder.sent[q]) + (2 if q == QUEUES[0] else 0) for q in QUEUES}
    r.check(
        f"every job finished within {limit:.0f} s",
        wait_until(lambda: all(drained(clients[q], q, expected[q])() for q in QUEUES), limit, 0.2),
    )
    entries = list(ledger.read(scene.ledger_path))
    for queue in QUEUES:
        ids = feeder.sent[queue] + ([j.id for j in longs] if queue == QUEUES[0] else [])
        t = tally(entries, clients[queue], queue, ids=ids)
        r.check(f"{queue}: 0 lost", not t.lost, t.lost[:10])
        r.check(f"{queue}: every job completed", t.states["completed"] == len(ids), t.states)
        if queue == QUEUES[0]:
            runs = {j.id: t.starts.get(j.id, []) for j in longs}
            ends = {j.id: t.finishes.get(j.id, []) for j in longs}
            r.check(
                "each suspect ran once more (attempt 2) and ended once",
                all(len(runs[i]) == 2 and len(ends[i]) == 1 and ends[i][0].attempt == 2
                    for i in runs),
                {i: ([(e.attempt, e.pid) for e in runs[i]], len(ends[i])) for i in runs},
            )  # fmt: skip
            workers = {p.pid for pool in (steady, victim) for p in pool.all_procs}
            r.check(
                "each suspect re-ran in a child process, not in a worker",
                all(e.pid not in workers for e in starts(2)),
                [(e.id, e.pid) for e in starts(2)],
            )
    r.metrics["suspects_rerun_after_s"] = round(rerun_at - killed, 2)
    for client in clients.values():
        client.close()
    steady.stop()
    victim.stop()
    return r

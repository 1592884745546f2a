"""Scenario 5: a poison job that kills its worker every time is failed after max_stalls, runs
alone while it is suspect, and holds up no other job."""

from __future__ import annotations

import time

from chaos import ledger
from chaos.checker import Result, tally
from chaos.harness import Enqueue, Scene, admin, drained
from chaos.scenarios import scenario


def _poison_alone(scene: Scene, r: Result, url: str, lease: float, max_stalls: int) -> None:
    """Deterministic: one worker (restarted when it dies), a poison job that kills it 0.5 s
    into each run, and three slow jobs. None of the three may fail with the poison."""
    pool = scene.workers(url, 1, queue="poison1", concurrency=4, lease=lease)
    pool.start()
    pool.wait_ready(20)
    producer = scene.producer(url, queue="poison1")
    jobs = [
        Enqueue(
            "poison1", "work", {"die_after": 0.5}, {"priority": "high", "max_stalls": max_stalls}
        )
    ]
    jobs += [Enqueue(f"slow{i}", "work", {"s": 0.5}) for i in range(3)]
    producer.send_until_acked(jobs, 10)
    client = admin(url)
    done = drained(client, "poison1", len(jobs))
    limit = max_stalls * (lease * 4 / 3 + 3) + 15
    t0 = time.monotonic()
    for _ in range(int(limit / 0.1) + 1):
        pool.respawn_dead()
        if done() or time.monotonic() - t0 > limit:
            break
        time.sleep(0.1)
    t = tally(list(ledger.read(scene.ledger_path)), client, "poison1", ids=[j.id for j in jobs])
    states = {j.id: t.view[j.id].state for j in jobs}
    r.check(
        "one worker, a poison job and 3 slow jobs: the 3 complete (a suspect runs isolated)",
        all(states[f"slow{i}"] == "completed" for i in range(3)) and states["poison1"] == "failed",
        {k: (v, t.view[k].stalls) for k, v in states.items()},
    )
    client.close()
    pool.stop()


@scenario(
    5,
    "poison-job",
    "A job that kills its worker every time fails after max_stalls; others are not held up",
    full=dict(normal=1_000, workers=2, concurrency=4, lease=2.0, max_stalls=3),
    bounded=dict(normal=300, workers=2, concurrency=4, lease=2.0, max_stalls=3),
)
def poison(
    scene: Scene, *, normal: int, workers: int, concurrency: int, lease: float, max_stalls: int
) -> Result:
    r = Result("poison-job")
    url = scene.server().url
    pool = scene.workers(url, workers, concurrency=concurrency, lease=lease)
    pool.start()
    r.check("workers announced themselves", pool.wait_ready(20))
    producer = scene.producer(url)
    client = admin(url)
    jobs = [
        Enqueue("poison", "work", {"die": True}, {"priority": "high", "max_stalls": max_stalls})
    ]
    jobs += [Enqueue(f"n{i:05d}", "work", {"s": 0.02}) for i in range(normal)]
    t0 = time.monotonic()
    producer.send_until_acked(jobs, 10)
    deaths = 0
    done = drained(client, "chaos", len(jobs))
    limit = max_stalls * (lease * 4 / 3 + 3) + normal * 0.02 / (workers * concurrency) + 15
    for _ in range(int(limit / 0.1) + 1):
        deaths += pool.respawn_dead()
        if done() or time.monotonic() - t0 > limit:
            break
        time.sleep(0.1)
    all_done_s = time.monotonic() - t0
    entries = list(ledger.read(scene.ledger_path))
    t = tally(entries, client, "chaos")
    r.absorb(t)
    r.kills = deaths
    p = t.view["poison"]
    r.check(f"finished within {limit:.0f} s", done(), f"{all_done_s:.1f} s")
    r.check("poison failed with a reason", p.state == "failed" and "Stalled" in (p.error or ""), p)
    r.check(
        f"poison ran exactly max_stalls = {max_stalls} times",
        len(t.starts.get("poison", [])) == max_stalls,
        len(t.starts.get("poison", [])),
    )
    bystanders = {k: v for k, v in t.view.items() if k != "poison" and v.state != "completed"}
    r.check(
        "every other job completed (none failed with the poison)",
        not bystanders,
        {k: (v.state, v.error and v.error[:60]) for k, v in list(bystanders.items())[:10]},
    )
    r.check("0 lost", not t.lost, t.lost[:10])
    caught = sorted({k for k, v in t.view.items() if k != "poison" and v.stalls})
    pool.stop()
    _poison_alone(scene, r, url, lease, max_stalls)
    normal_finish = [min(f.mono for f in t.finishes[k]) for k in t.finishes if k != "poison"]
    r.metrics.update(
        worker_deaths=deaths,
        bystanders_stalled=len(caught),
        bystanders_max_stalls=max((t.view[k].stalls for k in caught), default=0),
        normal_done_after_s=round(max(normal_finish) - t0, 2) if normal_finish else None,
        poison_failed_after_s=round(all_done_s, 2),
    )
    client.close()
    return r

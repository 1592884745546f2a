"""Scenarios 30-33: execution. Children killed mid-job, a child past its memory
limit, a handler blocking the event loop, aborts racing completions. Every one: 0 lost, no run
counted twice, nothing recorded finished while its code still ran."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence

import psutil
import redis

from chaos import ledger
from chaos.checker import Result, tally
from chaos.harness import Enqueue, Scene, WorkerPool, admin, drained
from chaos.scenarios import scenario
from conveyor.client.sync import Queue
from conveyor.protocol.keys import QueueKeys


def _wait(done: Callable[[], bool], limit: float) -> float:
    t0 = time.monotonic()
    while not done() and time.monotonic() - t0 < limit:
        time.sleep(0.1)
    return time.monotonic() - t0


def _job_children(pool: WorkerPool) -> list[psutil.Process]:
    """The processes running jobs: the forkserver's children (the forkserver
    itself, a child of the worker, is left alone)."""
    found = []
    for proc in pool.live():
        try:
            for child in psutil.Process(proc.pid).children(recursive=True):
                if "forkserver" in " ".join(child.cmdline()):
                    found.extend(child.children())
        except psutil.Error:
            continue
    return found


def _finished_after_last_entry(client: redis.Redis, scene: Scene, ids: Sequence[str]) -> list[str]:
    """Jobs whose record says finished before one of their handler's ledger entries: a run
    recorded as over while its code still ran. Same host, same clock."""
    keys = QueueKeys("conveyor", "chaos")
    last: dict[str, float] = {}
    for e in ledger.read(scene.ledger_path):
        if e.kind in ("start", "finish"):
            last[e.id] = max(last.get(e.id, 0.0), e.wall)
    bad = []
    for job_id in ids:
        finished = client.hget(keys.job(job_id), "finished_at")
        if finished is not None and job_id in last and int(finished) / 1000 < last[job_id] - 0.005:
            bad.append(job_id)
    return bad


def _killed_after_finish(entries: Sequence[ledger.Entry], duplicates: Sequence[str]) -> set[str]:
    """Jobs whose handler ended twice because the child that ran it to its end was SIGKILLed
    after that end, before the worker had its result: the run was lost, and its rerun is
    what at-least-once delivery promises, not a run counted twice. Anything else stays a
    duplicate."""
    kills = {e.pid: e.mono for e in entries if e.kind == "kill" and e.id == "child"}
    first: dict[str, ledger.Entry] = {}
    for e in entries:
        if e.kind == "finish" and e.id not in first:
            first[e.id] = e
    return {
        job_id
        for job_id in duplicates
        if job_id in first and kills.get(first[job_id].pid, -1.0) >= first[job_id].mono
    }


def _common_checks(r: Result, client: redis.Redis, scene: Scene, ids: Sequence[str]) -> None:
    entries = list(ledger.read(scene.ledger_path))
    t = tally(entries, client, "chaos", ids=ids)
    r.absorb(t)
    r.check("0 lost", not t.lost, t.lost[:10])
    explained = _killed_after_finish(entries, t.duplicates)
    counted_twice = [j for j in t.duplicates if j not in explained]
    r.check(
        "no run counted twice (0 duplicated completions)", not counted_twice, counted_twice[:10]
    )
    r.metrics.update(reruns_of_runs_killed_after_their_end=len(explained))
    r.check("no completion accepted twice (fencing)", not t.double_acks, t.double_acks[:10])
    early = _finished_after_last_entry(client, scene, ids)
    r.check("nothing recorded finished while its code still ran", not early, early[:10])


@scenario(
    30,
    "child-killed",
    "Children of a process worker SIGKILLed mid-job: only their jobs fail, retried; 0 lost",
    full=dict(jobs=600, kills=40, processes=2),
    bounded=dict(jobs=120, kills=8, processes=2),
)
def child_killed(scene: Scene, *, jobs: int, kills: int, processes: int) -> Result:
    r = Result("child-killed")
    url = scene.server().url
    pool = scene.workers(url, 1, concurrency=4, lease=2.0, args=["--processes", str(processes)])
    pool.start()
    r.check("worker announced itself", pool.wait_ready(30))
    work = [
        Enqueue(f"p{i:04d}", "work_process", {"s": 0.05, "cpu": 0.01}, {"max_failures": 10})
        for i in range(jobs)
    ]
    scene.producer(url).send_until_acked(work, 10)
    client = admin(url)
    done = drained(client, "chaos", jobs)
    killed = 0
    deadline = time.monotonic() + 120
    while killed < kills and not done() and time.monotonic() < deadline:
        victims = _job_children(pool)
        if victims:
            victim = scene.rng.choice(victims)
            scene.ledger.record("kill", "child", 0, "SIGKILL", pid=victim.pid)
            try:
                victim.send_signal(signal.SIGKILL)
                killed += 1
            except psutil.Error:
                pass
        time.sleep(scene.rng.uniform(0.1, 0.4))
    took = _wait(done, 120)
    r.kills = killed
    r.check(f"{killed} children killed", killed > 0, killed)
    r.check("every job finished", done(), f"{took:.1f} s")
    ids = [j.id for j in work]
    _common_checks(r, client, scene, ids)
    states = tally(list(ledger.read(scene.ledger_path)), client, "chaos", ids=ids).states
    r.check(
        "every job completed (a dead child's job is retried)", states["completed"] == jobs, states
    )
    keys = QueueKeys("conveyor", "chaos")
    errors = [(client.hget(keys.job(i), "error") or b"").decode() for i in ids]
    hit = [i for i, error in zip(ids, errors, strict=True) if "ProcessDiedError" in error]
    r.check("the killed children's jobs failed with ProcessDiedError first", bool(hit), len(hit))
    r.check("the worker itself never died", pool.respawn_dead() == 0)
    r.metrics.update(children_killed=killed, jobs_hit=len(hit), drain_s=round(took, 2))
    pool.stop()
    client.close()
    return r


@scenario(
    31,
    "child-memory",
    "Jobs that take a child past max_memory_per_child: the child is recycled, nothing lost",
    full=dict(jobs=200, eaters=20, mib=150, limit_mib=100),
    bounded=dict(jobs=40, eaters=6, mib=150, limit_mib=100),
)
def child_memory(scene: Scene, *, jobs: int, eaters: int, mib: int, limit_mib: int) -> Result:
    r = Result("child-memory")
    url = scene.server().url
    args = ["--processes", "2", "--max-memory-per-child", str(limit_mib)]
    pool = scene.workers(url, 1, concurrency=2, lease=2.0, args=args)
    pool.start()
    r.check("worker announced itself", pool.wait_ready(30))
    every = max(1, jobs // eaters)
    work = [
        Enqueue(f"m{i:04d}", "work_process", {"hold_mb": mib} if i % every == 0 else {"s": 0.01})
        for i in range(jobs)
    ]
    scene.producer(url).send_until_acked(work, 10)
    client = admin(url)
    took = _wait(drained(client, "chaos", jobs), 120)
    r.check("every job finished", drained(client, "chaos", jobs)(), f"{took:.1f} s")
    ids = [j.id for j in work]
    _common_checks(r, client, scene, ids)
    with Queue("chaos", url=url) as queue:
        pids = {queue.wait_result(i, timeout=5)["pid"] for i in ids}
    eaten = len([j for j in work if j.data.get("hold_mb")])
    r.check(
        f"children recycled after the {eaten} jobs over the limit",
        len(pids) > 2 + eaten // 2,
        f"{len(pids)} distinct children",
    )
    r.check("the worker itself never died", pool.respawn_dead() == 0)
    r.metrics.update(distinct_children=len(pids), drain_s=round(took, 2))
    pool.stop()
    client.close()
    return r


@scenario(
    32,
    "loop-blocker",
    "An async handler blocks the event loop: it is named and fails alone; "
    "the others do not time out",
    full=dict(bystanders=200, blockers=4, block_s=2.5),
    bounded=dict(bystanders=40, blockers=2, block_s=2.0),
)
def loop_blocker(scene: Scene, *, bystanders: int, blockers: int, block_s: float) -> Result:
    r = Result("loop-blocker")
    url = scene.server().url
    pool = scene.workers(url, 1, concurrency=10, lease=3.0)
    pool.start()
    r.check("worker announced itself", pool.wait_ready(30))
    work = [Enqueue(f"b{i:04d}", "work", {"s": 0.3}, {"timeout": 1.0}) for i in range(bystanders)]
    work += [
        Enqueue(f"hog{i}", "work", {"cpu": block_s}, {"timeout": 1.0, "max_failures": 1})
        for i in range(blockers)
    ]
    scene.producer(url).send_until_acked(scene.rng.sample(work, len(work)), 10)
    client = admin(url)
    took = _wait(drained(client, "chaos", len(work)), 120)
    r.check("every job finished", drained(client, "chaos", len(work))(), f"{took:.1f} s")
    ids = [j.id for j in work]
    _common_checks(r, client, scene, ids)
    t = tally(list(ledger.read(scene.ledger_path)), client, "chaos", ids=ids)
    timed_out = [
        (i, t.view[i].error) for i in ids if i.startswith("b") and t.view[i].failures
    ]
    r.check("no bystander timed out because of the blocked loop", not timed_out, timed_out[:4])
    hogs = [t.view[f"hog{i}"] for i in range(blockers)]
    r.check(
        "each blocker failed: past its timeout while blocking the event loop",
        all(h.state == "failed" and "blocking the event loop" in (h.error or "") for h in hogs),
        [(h.state, (h.error or "")[:80]) for h in hogs],
    )
    logs = "".join(p.log_path.read_text(errors="replace") for p in pool.all_procs)
    r.check(
        "the watchdog named the blocking task",
        "event loop blocked" in logs and "task 'work'" in logs,
    )
    r.check("the worker itself never died", pool.respawn_dead() == 0)
    r.metrics.update(drain_s=round(took, 2))
    pool.stop()
    client.close()
    return r


@scenario(
    33,
    "abort-races",
    "Aborts racing completions (async, thread, process): each job ends once, aborted or not",
    full=dict(jobs=600, aborts=300),
    bounded=dict(jobs=120, aborts=60),
)
def abort_races(scene: Scene, *, jobs: int, aborts: int) -> Result:
    r = Result("abort-races")
    url = scene.server().url
    pool = scene.workers(url, 2, concurrency=6, lease=2.0, args=["--processes", "2"])
    pool.start()
    r.check("workers announced themselves", pool.wait_ready(30))
    tasks = ("work", "work_sync", "work_process")
    work = [
        Enqueue(
            f"a{i:04d}",
            tasks[i % 3],
            {"s": round(scene.rng.uniform(0, 0.3), 3)},
            {"max_failures": 1},
        )
        for i in range(jobs)
    ]
    scene.producer(url).send_until_acked(work, 10)
    client = admin(url)
    said: dict[str, str] = {}
    keys = QueueKeys("conveyor", "chaos")
    _wait(lambda: client.zcard(keys.active) > 0, 30)  # the workers run jobs: now race them
    with Queue("chaos", url=url) as queue:
        # in queue order, spread over the run: some before they start, some while they run
        targets = sorted(scene.rng.sample([j.id for j in work], aborts))
        for job_id in targets:
            said[job_id] = queue.abort(job_id)
            time.sleep(scene.rng.uniform(0, 0.05))

    def settled() -> bool:
        pipe = client.pipeline(transaction=False)
        for key in (keys.ready, keys.scheduled, keys.active):
            pipe.zcard(key)
        return not any(pipe.execute())

    took = _wait(settled, 120)
    r.check("every job settled", settled(), f"{took:.1f} s")
    cancelled = {i for i, what in said.items() if what == "cancelled"}
    ids = [j.id for j in work if j.id not in cancelled]
    _common_checks(r, client, scene, ids)
    t = tally(list(ledger.read(scene.ledger_path)), client, "chaos", ids=[j.id for j in work])
    gone = [i for i in cancelled if t.view[i].state is not None]
    r.check("a job aborted before it started is gone (cancelled)", not gone, gone[:10])
    wrong = [
        i for i in ids
        if not (t.view[i].state == "completed"
                or (t.view[i].state == "failed" and i in said
                    and (t.view[i].error or "").startswith("AbortedError")))
    ]  # fmt: skip
    r.check(
        "each job completed, or failed with AbortedError because it was aborted",
        not wrong,
        [(i, t.view[i].state, (t.view[i].error or "")[:60]) for i in wrong[:10]],
    )
    ran_after = [i for i in cancelled if i in t.starts]
    r.check("a cancelled job never ran", not ran_after, ran_after[:10])
    aborted = sum(1 for i in ids if (t.view[i].error or "").startswith("AbortedError"))
    r.metrics.update(
        cancelled=len(cancelled), aborted_running=aborted, completed=t.states["completed"],
        settle_s=round(took, 2),
    )  # fmt: skip
    r.check(
        "the race happened both ways", aborted > 0 and len(cancelled) > 0, (aborted, len(cancelled))
    )
    pool.stop()
    client.close()
    return r

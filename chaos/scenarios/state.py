"""Scenarios 14 and 15: corrupt state straight into Redis, and many producers racing on one id
(scenario 13, hostile input through the API, is in hostile.py)."""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from chaos import ledger
from chaos.checker import Result, tally
from chaos.harness import ROOT, Enqueue, Scene, admin, unhandled_tracebacks, wait_until
from chaos.scenarios import scenario
from conveyor.protocol.keys import QueueKeys

# --------------------------------------------------------------------------- scenario 14

SEQ0 = 1 << 30
SPAN = 1 << 31


def valid_fields(
    task: str = "work", data: bytes | str = b'{"s":0}', seq: int = 1
) -> dict[str, Any]:
    """A waiting job's fields, as enqueue.lua writes them."""
    now = int(time.time() * 1000)
    return {
        "state": "waiting", "task": task, "data": data, "priority": 1000, "seq": SEQ0 + seq,
        "attempts": 0, "failures": 0, "stalls": 0, "max_failures": 3, "max_stalls": 3,
        "min_backoff": 1000, "max_backoff": 300000, "timeout": 300000,
        "result_ttl": 86400000, "group": "", "created_at": now, "run_at": now,
    }  # fmt: skip


@dataclass(frozen=True)
class Corruption:
    """One kind of corrupt state, and what must become of it."""

    name: str
    write: Callable[[redis.Redis, QueueKeys, Path], None]
    # "failed:<text>": failed with an error containing <text>; "ran": completed or failed
    # after its handler ran; "dropped": the index entry is gone and nothing ran
    expect: str


def _put(client: redis.Redis, keys: QueueKeys, job_id: str, fields: dict[str, Any]) -> None:
    """Write a job record and put its id in `ready`, as enqueue.lua would."""
    client.hset(keys.job(job_id), mapping=fields)
    prio = fields.get("priority", 1000)
    seq = fields.get("seq", SEQ0)
    prio = int(prio) if str(prio).isdigit() else 1000
    seq = int(seq) if str(seq).isdigit() else SEQ0
    client.zadd(keys.ready, {job_id: prio * SPAN + seq})
    client.zadd(keys.marker, {"0": 0})


class _Canary:
    """Unpickling this creates a file: the proof that something unpickled job data."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.path), "w"))


def _with(**changes: Any) -> Callable[[redis.Redis, QueueKeys, Path], None]:
    def write(client: redis.Redis, keys: QueueKeys, scratch: Path) -> None:
        fields = valid_fields()
        fields.update({k: v for k, v in changes.items() if v is not None})
        for k in [k for k, v in changes.items() if v is None]:
            fields.pop(k)
        _put(client, keys, "bad", fields)

    return write


def _pickled(client: redis.Redis, keys: QueueKeys, scratch: Path) -> None:
    _put(client, keys, "bad", valid_fields(data=pickle.dumps(_Canary(scratch / "unpickled"))))


def _import_path(client: redis.Redis, keys: QueueKeys, scratch: Path) -> None:
    # a module next to the worker that leaves a file behind if anyone imports it
    (scratch / "chaos_canary_mod.py").write_text(
        f"open({str(scratch / 'imported')!r}, 'w').close()\ndef boom(data):\n    return 1\n"
    )
    _put(client, keys, "bad", valid_fields(task="chaos_canary_mod:boom"))
    client.hset(keys.job("bad2"), mapping=valid_fields(task="chaos_canary_mod.boom", seq=2))
    client.zadd(keys.ready, {"bad2": 1000 * SPAN + SEQ0 + 2})


def _bare(data: str) -> Callable[[redis.Redis, QueueKeys, Path], None]:
    def write(client: redis.Redis, keys: QueueKeys, scratch: Path) -> None:
        client.hset(keys.job("bad"), mapping={"state": "waiting", "task": "work", "data": data})
        client.zadd(keys.ready, {"bad": 0})
        client.zadd(keys.marker, {"0": 0})

    return write


def _index_only(index: str) -> Callable[[redis.Redis, QueueKeys, Path], None]:
    def write(client: redis.Redis, keys: QueueKeys, scratch: Path) -> None:
        client.zadd(getattr(keys, index), {"bad": 0 if index != "ready" else 1})
        client.zadd(keys.marker, {"0": 0})

    return write


DEEP = "[" * 100_000 + "]" * 100_000

CORRUPTIONS = [
    Corruption("undecodable-data", _with(data=b"\x80\x81{not json"), "failed:UndecodableDataError"),
    Corruption("truncated-json", _with(data='{"s": 0'), "failed:UndecodableDataError"),
    Corruption("pickle-data", _pickled, "failed:UndecodableDataError"),
    Corruption("unknown-task", _with(task="os.system"), "failed:UnknownTaskError"),
    Corruption("import-path-task", _import_path, "failed:UnknownTaskError"),
    Corruption("non-utf8-task", _with(task=b"\xff\xfe\x00"), "failed:UnknownTaskError"),
    Corruption("missing-fields-ok", _bare('{"s":0}'), "ran"),
    Corruption("missing-fields-failing", _bare('{"fail":99}'), "failed:planned failure"),
    Corruption(
        "non-numeric-options",
        _with(data='{"fail":99}', max_failures="lots", min_backoff="x"),
        "failed:planned failure",
    ),
    Corruption("non-integer-attempts", _with(attempts="many"), "failed:"),
    Corruption("unknown-state", _with(state="zombie"), "failed:"),
    Corruption("deeply-nested-data", _with(data=DEEP), "failed:"),
    Corruption("huge-data", _with(data='{"s":0,"pad":"' + "x" * (8 << 20) + '"}'), "ran"),
    Corruption("id-in-ready-no-hash", _index_only("ready"), "failed:job record missing"),
    Corruption("id-in-scheduled-no-hash", _index_only("scheduled"), "dropped"),
    Corruption("id-in-active-no-hash", _index_only("active"), "dropped"),
]


@scenario(
    14,
    "corrupt-state",
    "Corrupt records written straight into Redis: failed with a reason, worker keeps running",
    full=dict(normal=20, settle=25.0),
    bounded=dict(normal=5, settle=10.0),
)
def corrupt_state(
    scene: Scene, *, normal: int, settle: float, only: tuple[str, ...] = ()
) -> Result:
    r = Result("corrupt-state")
    url = scene.server().url
    client = admin(url)
    cases = [c for c in CORRUPTIONS if not only or c.name in only]
    pools = {}
    for c in cases:
        # the scratch dir is on the workers' path: a canary module there proves no import
        path = os.pathsep.join([str(ROOT), str(scene.scratch)])
        pool = scene.workers(
            url, 1, queue=f"c-{c.name}", concurrency=4, lease=2.0, env={"PYTHONPATH": path}
        )
        pool.start()
        pools[c.name] = pool
    for c in cases:
        r.check(f"{c.name}: worker ready", pools[c.name].wait_ready(30))
    # the corrupt job first, then normal jobs through the API that must still complete
    for c in cases:
        keys = QueueKeys("conveyor", f"c-{c.name}")
        c.write(client, keys, scene.scratch)
        producer = scene.producer(url, queue=f"c-{c.name}")
        producer.send_until_acked(
            [Enqueue(f"ok{i}", "work", {"s": 0.01}) for i in range(normal)], 10
        )
    deadline = time.monotonic() + settle

    def settled(c: Corruption) -> bool:
        keys = QueueKeys("conveyor", f"c-{c.name}")
        oks = [client.hget(keys.job(f"ok{i}"), "state") for i in range(normal)]
        if any(s != b"completed" for s in oks):
            return False
        state = client.hget(keys.job("bad"), "state")
        if c.expect.startswith("failed"):
            return state == b"failed"
        return True

    for _ in range(int(settle / 0.2) + 1):
        if all(settled(c) for c in cases) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    entries = list(ledger.read(scene.ledger_path))
    outcome: dict[str, dict[str, Any]] = {}
    for c in cases:
        queue = f"c-{c.name}"
        keys = QueueKeys("conveyor", queue)
        pool = pools[c.name]
        alive = bool(pool.procs[0] and pool.procs[0].alive)
        raw = client.hgetall(keys.job("bad"))
        state = raw.get(b"state", b"").decode(errors="replace") or None
        error = raw.get(b"error", b"").decode(errors="replace")
        ran = any(
            e.kind == "finish" and e.id == "bad" for e in entries if e.pid == pool.procs[0].pid
        )  # type: ignore[union-attr]
        oks = [client.hget(keys.job(f"ok{i}"), "state") for i in range(normal)]
        ok_done = sum(1 for s in oks if s == b"completed")
        in_index = any(
            client.zscore(k, "bad") is not None for k in (keys.ready, keys.scheduled, keys.active)
        )
        if state is None and c.expect.startswith("failed:"):
            # a record without result_ttl is kept 0 s: its reason is in the failed event
            for _, fields in client.xrange(keys.events, count=10_000):
                if fields.get(b"event") == b"failed" and fields.get(b"id") == b"bad":
                    state, error = "failed (not retained)", fields.get(b"error", b"").decode()
        if c.expect.startswith("failed:"):
            good = (
                state is not None
                and state.startswith("failed")
                and c.expect[7:] in error
                and bool(error)
            )
        elif c.expect == "ran":
            good = ran or state in ("completed", "failed")
        else:  # dropped
            good = not in_index and state is None
        canaries = [
            p.name for p in (scene.scratch / "unpickled", scene.scratch / "imported") if p.exists()
        ]
        crashed = bool(unhandled_tracebacks(pool.logs()))
        ok = good and alive and ok_done == normal and not canaries and not crashed
        detail = {
            "state": state, "error": error.splitlines()[0][:100] if error else "",
            "worker_alive": alive, "worker_traceback": crashed,
            "normal_completed": f"{ok_done}/{normal}",
            "still_indexed": in_index, "canaries": canaries,
        }  # fmt: skip
        outcome[c.name] = {"ok": ok, **detail}
        r.check(f"{c.name}: {c.expect}; worker alive, no traceback; other jobs done", ok, detail)
    r.metrics["cases"] = outcome
    r.jobs = len(cases) * normal
    r.lost = sum(normal - int(o["normal_completed"].split("/")[0]) for o in outcome.values())
    client.close()
    return r


# --------------------------------------------------------------------------- scenario 15


@scenario(
    15,
    "same-id-race",
    "50 producer processes enqueue the same id, while workers run: one job, runs never overlap",
    full=dict(producers=50, rounds=5),
    bounded=dict(producers=50, rounds=1),
)
def same_id(
    scene: Scene, *, producers: int, rounds: int, queue: str = "chaos", url: str | None = None
) -> Result:
    from collections import Counter

    from chaos.harness import drained
    from chaos.races import overlaps, race

    r = Result("same-id-race")
    url = url or scene.server().url
    client = admin(url, queue)
    ids = [f"same{n}" for n in range(rounds)]
    book = str(scene.ledger_path)
    pool = scene.workers(url, 2, queue=queue, concurrency=4)
    pool.start()
    r.check("workers ready", pool.wait_ready(20))
    # 1. the race with workers running: one record; a worker may claim it mid-race, and the
    # later enqueues then become its one blocked twin (one follow-up run at most)
    blocked: dict[str, int] = {}
    for job_id in ids:
        got = race(url, queue, producers, [job_id], {"s": 0.05}, ledger_path=book)
        outcomes = Counter(got.outcomes)
        ok = (
            got.racers == producers
            and outcomes["created"] == 1
            and set(outcomes) <= {"created", "updated", "blocked", "exists"}
        )
        r.check(f"{job_id}: {producers} processes, 1 created, no error", ok, dict(outcomes))
        blocked[job_id] = outcomes["blocked"]
    r.check("all ran", wait_until(drained(client, queue, rounds), 30))
    # 2. the same race after the job finished: the retained record answers "exists"
    for job_id in ids:
        outcomes = Counter(race(url, queue, producers, [job_id], {"s": 0.05}).outcomes)
        r.check(
            f"{job_id} again after completion: all 'exists'",
            outcomes == Counter({"exists": producers}),
            dict(outcomes),
        )
    # 3. the race while the job runs: the re-enqueues collapse into one follow-up run
    producer = scene.producer(url, queue=queue)
    running: list[bool] = []

    def start_busy() -> None:
        """Once every racer waits at the barrier: start `busy` and wait until it runs."""
        producer.send_until_acked([Enqueue("busy", "work", {"s": 6.0})], 10)
        running.append(wait_until(
            lambda: any(e.kind == "start" and e.id == "busy"
                        for e in ledger.read(scene.ledger_path)),
            10,
        ))  # fmt: skip

    got = race(url, queue, producers, ["busy"], {"s": 0.05}, before=start_busy)
    r.check("busy: running when the racers were let go", running == [True], running)
    outcomes = Counter(got.outcomes)
    r.check(
        f"busy: {producers} re-enqueues while it runs are all held as a blocked twin",
        outcomes == Counter({"blocked": producers}),
        dict(outcomes),
    )
    r.check("everything finished", wait_until(drained(client, queue, rounds + 1), 30))
    time.sleep(1.0)  # a third run, if any, would start now
    entries = list(ledger.read(scene.ledger_path))
    t = tally(entries, client, queue, ids=[*ids, "busy"])
    r.absorb(t)
    kills = [e for e in entries if e.kind in ("kill", "dead")]
    for job_id in [*ids, "busy"]:
        runs = t.starts.get(job_id, [])
        clash = overlaps(runs, t.finishes.get(job_id, []), kills)
        r.check(
            f"{job_id}: its runs never overlapped",
            not clash,
            f"{len(runs)} runs, {clash} overlapping",
        )
    for job_id in ids:
        # the racers outlast a 50 ms run: each run after the first needs an enqueue that
        # found the job running (a blocked twin), so runs <= 1 + blocked outcomes
        n = len(t.starts.get(job_id, []))
        r.check(
            f"{job_id}: ran at least once, and again only after a blocked enqueue",
            1 <= n <= 1 + blocked[job_id],
            f"{n} runs, {blocked[job_id]} blocked outcomes",
        )
    # 50 processes on a busy machine do not all land within the first run: one that lands
    # in the follow-up run makes a twin of its own, so "exactly twice" would be luck
    busy_runs = len(t.starts.get("busy", []))
    r.check(
        "busy: ran again after its run (the twin), and again only after a blocked enqueue",
        2 <= busy_runs <= 1 + producers,
        busy_runs,
    )
    r.check("0 lost", not t.lost, t.lost)
    r.check("0 completions accepted twice (fencing)", not t.double_acks, t.double_acks)
    r.metrics.update(producers=producers, rounds=rounds, blocked_outcomes=blocked)
    client.close()
    return r

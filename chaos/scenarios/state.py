"""Scenarios 13-15: hostile input through the API, corrupt state straight into Redis, and
many producers racing on one id."""

from __future__ import annotations

import os
import pickle
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from redis.crc import key_slot

from chaos import ledger
from chaos.checker import Result, tally
from chaos.harness import ROOT, Enqueue, Scene, admin, settings, wait_until
from chaos.scenarios import scenario
from conveyor import JobRequest
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
        crashed = "Traceback" in pool.logs()
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


# --------------------------------------------------------------------------- scenario 13


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def _all_keys(client: redis.Redis) -> set[bytes]:
    keys: set[bytes] = set()
    cursor = 0
    for _ in range(10_000):  # bounded SCAN (test code only; the library never scans)
        cursor, batch = client.scan(cursor, count=1000)
        keys.update(batch)
        if cursor == 0:
            break
    return keys


BAD_NAMES = ["", "a:b", "a{b", "a}b", "a*b", "a?b", "a[b]", "a\nb", "a\x00b", "a b", " a",
             "-a", "ü", "x" * 10_240, "x" * 129]  # fmt: skip
BAD_IDS = ["", "a b", "a\nb", "a\x00b", "\t", "ü", "x" * 257, "x" * 10_240]
BAD_TASKS = ["", "a\nb", "\x00", "x" * 201, "x" * 10_240]
TRICKY_IDS = ["a:b", "{x}", "}{", "a*", "?", "[abc]", "job:x", "x:job:y", "{chaos}:job:z",
              "12345", "-", "a" * 256, "done:x", "blocked:x"]  # fmt: skip
ID_ALPHABET = ":{}*?[]job-_.!~|\\/'\"" + "ab01"


@scenario(
    13,
    "hostile-input",
    "Hostile payloads, names and ids: typed errors before any write, no key collisions",
    full=dict(examples=2_000, max_payload=512 * 1024),
    bounded=dict(examples=300, max_payload=512 * 1024),
)
def hostile_input(scene: Scene, *, examples: int, max_payload: int) -> Result:
    from conveyor import Queue, QueueSettings
    from conveyor.client.tasks import Tasks
    from conveyor.errors import (
        ConveyorError,
        InvalidJobIdError,
        InvalidNameError,
        NotSerializableError,
        PayloadTooLargeError,
        UnknownOptionError,
        ValidationError,
    )

    r = Result("hostile-input")
    url = scene.server().url
    client = admin(url)
    q = Queue("chaos", url=url, settings=settings(max_payload=max_payload))
    q.check()  # the meta hash exists from here on: every later key is a job's
    before = _all_keys(client)
    cases: dict[str, dict[str, Any]] = {}

    def reject(name: str, expected: type[Exception], call: Callable[[], Any]) -> None:
        started = time.monotonic()
        try:
            call()
            got: str = "no error"
            good = False
        except ConveyorError as exc:
            got = f"{type(exc).__name__}: {str(exc)[:90]}"
            good = isinstance(exc, expected)
        except Exception as exc:  # not in the tree: a finding
            got = f"{type(exc).__name__} (not a ConveyorError): {str(exc)[:90]}"
            good = False
        took = time.monotonic() - started
        untouched = _all_keys(client) == before
        ok = good and untouched
        cases[name] = {
            "ok": ok,
            "error": got,
            "nothing_written": untouched,
            "ms": round(took * 1000, 1),
        }
        r.check(f"reject {name}: {expected.__name__}, nothing written", ok, got)

    big = "x" * (max_payload - 2)  # its JSON is exactly max_payload bytes
    reject("data NaN", NotSerializableError, lambda: q.enqueue("work", float("nan")))
    reject("data Infinity", NotSerializableError, lambda: q.enqueue("work", {"x": float("inf")}))
    reject("data bytes (non-UTF-8)", NotSerializableError, lambda: q.enqueue("work", b"\xff\xfe"))
    reject("data lone surrogate", NotSerializableError, lambda: q.enqueue("work", "a\ud800b"))
    reject("data object", NotSerializableError, lambda: q.enqueue("work", object()))
    reject("data set", NotSerializableError, lambda: q.enqueue("work", {1, 2}))
    reject(
        "data nested 100000 deep", NotSerializableError, lambda: q.enqueue("work", _nested(100_000))
    )
    reject(
        "data 1,000,000-element list",
        PayloadTooLargeError,
        lambda: q.enqueue("work", list(range(1_000_000))),
    )
    reject("data limit + 1 byte", PayloadTooLargeError, lambda: q.enqueue("work", big + "x"))
    reject(
        "data multi-byte over limit",
        PayloadTooLargeError,
        lambda: q.enqueue("work", "é" * (max_payload // 2)),
    )
    for name in BAD_NAMES:
        reject(f"queue name {name[:12]!r}", InvalidNameError, lambda n=name: Queue(n, url=url))
        reject(f"tasks name {name[:12]!r}", InvalidNameError, lambda n=name: Tasks(n, url=url))
    reject(
        "key prefix 'a:b'",
        InvalidNameError,
        lambda: Queue("q", url=url, settings=QueueSettings(prefix="a:b")),
    )
    for job_id in BAD_IDS:
        reject(
            f"job id {job_id[:12]!r}",
            InvalidJobIdError,
            lambda i=job_id: q.enqueue("work", 1, id=i),
        )
    for task in BAD_TASKS:
        reject(f"task name {task[:12]!r}", InvalidNameError, lambda t=task: q.enqueue(t, 1))
    reject("unknown option", UnknownOptionError, lambda: q.enqueue("work", 1, colour="red"))  # type: ignore[call-arg]
    for opt, value in [("priority", -1), ("priority", 2**22), ("priority", "urgent"),
                       ("delay", float("nan")), ("delay", -1), ("delay", float("inf")),
                       ("max_failures", 0), ("timeout", "1"), ("max_stalls", True)]:  # fmt: skip
        reject(
            f"option {opt}={value!r}",
            ValidationError,
            lambda o=opt, v=value: q.enqueue("work", 1, **{o: v}),
        )
    reject(
        "one bad job in a batch writes none",
        InvalidJobIdError,
        lambda: q.enqueue_many([("work", 1), ("work", 2), JobRequest("work", 3, {"id": "a b"})]),
    )

    # hostile but legal: accepted, stored and run unchanged
    accepted: dict[str, Any] = {
        "none": None, "empty-string": "", "empty-dict": {}, "empty-list": [], "zero": 0,
        "false": False, "unicode": "ünïcødé ✓ 🙂", "at-limit": big,
        "50k-ints": list(range(50_000)), "10k-keys": {f"k{i}": i for i in range(10_000)},
        "nested-50": _nested(50), "control-chars": "\x00\x01\n\r\t",
    }  # fmt: skip
    depth = 0
    for d in range(1000, 0, -10):  # the deepest nesting the producer accepts
        try:
            q.core.spec("work", _nested(d), {})
            depth = d
            break
        except NotSerializableError:
            continue
    for name, data in accepted.items():
        q.enqueue("work", data, id=f"ok-{name}")
    for job_id in TRICKY_IDS:
        q.enqueue("work", {"id": job_id}, id=job_id)
    # the deepest data the producer accepts goes to a queue (and a worker) of its own
    deep_q = Queue("deep", url=url, settings=settings())
    deep_q.enqueue("work", _nested(depth), id="deep")
    pool = scene.workers(url, 1, concurrency=4)
    deep_pool = scene.workers(url, 1, queue="deep", concurrency=1)
    pool.start()
    deep_pool.start()
    total = len(accepted) + len(TRICKY_IDS)
    from chaos.harness import drained

    wait_until(drained(client, "chaos", total), 30, 0.1)
    wait_until(drained(client, "deep", 1), 10, 0.1)
    alive = bool(pool.procs[0] and pool.procs[0].alive)
    for name, data in accepted.items():
        job = q.get(f"ok-{name}")
        ok = job is not None and job.state == "completed" and job.data == data and alive
        cases[f"accept {name}"] = {"ok": ok, "state": job and job.state, "worker_alive": alive}
        r.check(
            f"accept {name}: stored unchanged, runs, worker alive",
            ok,
            f"state={job and job.state} alive={alive}",
        )
    deep = deep_q.get("deep")
    deep_alive = bool(deep_pool.procs[0] and deep_pool.procs[0].alive)
    ok = deep is not None and deep.state in ("completed", "failed") and deep_alive
    cases["accept nested-at-producer-limit"] = {
        "ok": ok,
        "state": deep and deep.state,
        "worker_alive": deep_alive,
    }
    r.check(
        f"accept data nested {depth} deep (the producer's limit): it runs or fails with a "
        "reason, the worker lives",
        ok,
        f"state={deep and deep.state} alive={deep_alive}",
    )
    deep_q.close()
    for job_id in TRICKY_IDS:
        job = q.get(job_id)
        r.check(
            f"id {job_id[:20]!r}: its own record",
            job is not None and job.data == {"id": job_id},
            job and job.data,
        )
    r.metrics["producer_max_depth"] = depth

    # no collisions between queues: random (queue, id) pairs, each job reads back its own data
    rng = scene.rng
    names = ["a", "a.b", "a-b", "a_b", "ab", "b", "a.b.c", "job"]
    pairs: set[tuple[str, str]] = set()
    for _ in range(examples * 3):
        if len(pairs) >= examples:
            break
        job_id = "".join(rng.choice(ID_ALPHABET) for _ in range(rng.randint(1, 12)))
        pairs.add((rng.choice(names), job_id))
    queues = {n: Queue(n, url=url, settings=settings()) for n in names}
    for n, job_id in sorted(pairs):
        queues[n].enqueue("work", {"q": n, "id": job_id}, id=job_id)
    wrong = [
        (n, job_id)
        for n, job_id in sorted(pairs)
        if (job := queues[n].get(job_id)) is None or job.data != {"q": n, "id": job_id}
    ]
    r.check(f"{len(pairs)} random (queue, id) pairs: no collisions", not wrong, wrong[:5])
    slots = {key_slot(f"conveyor:{{{n}}}:job:{job_id}".encode()) for n, job_id in pairs if n == "a"}
    r.check("every key of a queue hashes to one cluster slot", len(slots) == 1, slots)
    src = Path(__file__).resolve().parents[2] / "src" / "conveyor"
    patterns = ("scan_iter(", ".scan(", "psubscribe(", '"KEYS"', "'KEYS'", ".keys(pattern")
    hits = [
        f"{p.name}:{pat}" for p in src.rglob("*.py") for pat in patterns if pat in p.read_text()
    ]
    hits += [
        p.name for p in src.rglob("*.lua") if "'KEYS'" in p.read_text() or "'SCAN'" in p.read_text()
    ]
    r.check("no SCAN/KEYS/PSUBSCRIBE pattern anywhere in the library", not hits, hits)
    for each in queues.values():
        each.close()
    q.close()
    r.metrics["cases"] = cases
    r.jobs = total + len(pairs)
    client.close()
    return r


# --------------------------------------------------------------------------- scenario 15


def _race(url: str, queue: str, producers: int, job_id: str, data: Any) -> list[str]:
    """`producers` threads, each with its own client, enqueue `job_id` at the same moment."""
    from conveyor import Queue

    queues = [Queue(queue, url=url, settings=settings()) for _ in range(producers)]
    for each in queues:
        each.check()
    barrier = threading.Barrier(producers, timeout=20)
    outcomes: list[str] = []
    lock = threading.Lock()

    def go(i: int) -> None:
        barrier.wait()
        try:
            outcome = queues[i].enqueue("work", {**data, "by": i}, id=job_id).outcome
        except Exception as exc:
            outcome = f"error {type(exc).__name__}"
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    for each in queues:
        each.close()
    return outcomes


@scenario(
    15,
    "same-id-race",
    "50 concurrent producers enqueue the same id: exactly one job",
    full=dict(producers=50, rounds=5),
    bounded=dict(producers=50, rounds=2),
)
def same_id(
    scene: Scene, *, producers: int, rounds: int, queue: str = "chaos", url: str | None = None
) -> Result:
    from collections import Counter

    from chaos.harness import drained

    r = Result("same-id-race")
    url = url or scene.server().url
    client = admin(url, queue)
    keys = QueueKeys("conveyor", queue)
    ids = [f"same{n}" for n in range(rounds)]
    # 1. no worker yet: the race is between producers only
    for job_id in ids:
        outcomes = Counter(_race(url, queue, producers, job_id, {"s": 0.05}))
        r.check(
            f"{job_id}: 1 created, {producers - 1} updated",
            outcomes == Counter({"created": 1, "updated": producers - 1}),
            dict(outcomes),
        )
        scene.ledger.record("enq", job_id)
    r.check("one ready entry per id", client.zcard(keys.ready) == rounds, client.zcard(keys.ready))
    pool = scene.workers(url, 2, queue=queue, concurrency=4)
    pool.start()
    r.check("all ran", wait_until(drained(client, queue, rounds), 20))
    # 2. the same race after the job finished: the retained record answers "exists"
    for job_id in ids:
        outcomes = Counter(_race(url, queue, producers, job_id, {"s": 0.05}))
        r.check(
            f"{job_id} again after completion: all 'exists'",
            outcomes == Counter({"exists": producers}),
            dict(outcomes),
        )
    # 3. the race while the job runs: the re-enqueues collapse into one follow-up run
    producer = scene.producer(url, queue=queue)
    producer.send_until_acked([Enqueue("busy", "work", {"s": 1.5})], 10)
    running = wait_until(
        lambda: any(e.kind == "start" and e.id == "busy" for e in ledger.read(scene.ledger_path)),
        10,
    )
    r.check("busy: running", running)
    outcomes = Counter(_race(url, queue, producers, "busy", {"s": 0.05}))
    r.check(
        f"busy: {producers} re-enqueues while it runs are held as one blocked twin",
        outcomes == Counter({"blocked": producers}),
        dict(outcomes),
    )
    time.sleep(0.5)
    r.check("everything finished", wait_until(drained(client, queue, rounds + 1), 20))
    time.sleep(1.0)  # a second run, if any, would start now
    entries = list(ledger.read(scene.ledger_path))
    t = tally(entries, client, queue, ids=ids)  # "busy" is meant to run twice: counted apart
    r.absorb(t)
    busy_runs = len([e for e in entries if e.kind == "start" and e.id == "busy"])
    for job_id in ids:
        r.check(
            f"{job_id}: ran exactly once",
            len(t.starts.get(job_id, [])) == 1,
            len(t.starts.get(job_id, [])),
        )
    r.check("busy: ran exactly twice (the run, then the one follow-up)", busy_runs == 2, busy_runs)
    r.check("0 lost", not t.lost, t.lost)
    r.metrics.update(producers=producers, rounds=rounds)
    client.close()
    return r

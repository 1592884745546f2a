"""Scenario 13: hostile payloads, names and ids through the API: typed errors before any
write, and no collisions between queues."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from redis.crc import key_slot

from chaos.checker import Result
from chaos.harness import Scene, admin, settings, wait_until
from chaos.scenarios import scenario
from conveyor import JobRequest


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


def _contents(client: redis.Redis) -> dict[bytes, bytes | None]:
    """Every key with its value (DUMP: type, encoding and content), so "nothing written"
    compares values, not only key names (a field added to the meta hash shows)."""
    keys = sorted(_all_keys(client))
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.dump(key)
    return dict(zip(keys, pipe.execute(), strict=True))


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
    before = _contents(client)
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
        untouched = _contents(client) == before
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

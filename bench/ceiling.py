"""The `ceiling` scenario: what Redis itself allows on this machine.

`redis-benchmark` runs against the harness's private queue server:
  * plain commands Conveyor's scripts are made of (HSET, ZADD, ZPOPMIN, XADD ...)
    with 50 clients unpipelined, 50 clients pipelined 16 deep, and 1 client;
  * Conveyor's own scripts, by EVALSHA with the arguments the client and the
    worker send: `enqueue_new` of 1 job (random ids), `enqueue_new` of 500 jobs
    (one chunk of enqueue_many), `claim` of `--claim-count` jobs and `complete`
    of as many, on a backlog the harness prepared;
and a Python loop measures what one redis-py connection (sync and asyncio) does.

From these: the jobs/s Redis allows a Conveyor worker (claim + complete), the
whole cycle (enqueue + claim + complete), and the enqueue paths.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import shutil
import subprocess
import time
from typing import Any
from urllib.parse import urlparse

import redis
import redis.asyncio

from conveyor import JobRequest, Queue
from conveyor.client.core import QueueCore
from conveyor.client.models import QueueSettings
from conveyor.protocol import ops

QUEUE = "ceiling"
EVENTS_MAXLEN = QueueSettings().events_maxlen
RAND = "__rand_int__"  # redis-benchmark puts a 12-digit random number here
# redis-benchmark parses -r with atoi: a keyspace past 2**31 overflows and every
# placeholder becomes 000000000000 (one id, upserted over and over)
KEYSPACE = 1_000_000_000
TOKEN = "ceiling-token"
WORKER = "ceiling-worker"
ENQUEUE_CHUNK = 500
MODES = {"c50_P1": (50, 1), "c50_P16": (50, 16), "c1_P1": (1, 1)}
COMMANDS = "ping_mbulk,set,hset,zadd,zpopmin,lpush,rpop"


def benchmark(
    host: str,
    port: int,
    *,
    clients: int,
    pipeline: int,
    n: int,
    command: list[str] | None = None,
    tests: str | None = None,
    keyspace: int | None = None,
) -> dict[str, float]:
    """redis-benchmark's requests/s per test."""
    binary = shutil.which("redis-benchmark")
    if binary is None:
        raise RuntimeError("redis-benchmark is not on PATH")
    argv = [binary, "-h", host, "-p", str(port), "-c", str(clients), "-P", str(pipeline),
            "-n", str(n), "--csv"]  # fmt: skip
    if keyspace:
        argv += ["-r", str(keyspace)]
    if tests:
        argv += ["-t", tests]
    if command:
        argv += command
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=True).stdout
    rows = list(csv.reader(io.StringIO(out)))
    return {row[0]: float(row[1]) for row in rows[1:] if len(row) > 1}


def evalsha(call: ops.Call, sha: str) -> list[str]:
    return ["EVALSHA", sha, str(len(call.keys)), *call.keys, *(str(a) for a in call.args)]


def only(result: dict[str, float]) -> float:
    if len(result) != 1:
        raise RuntimeError(f"expected one redis-benchmark result, got {result}")
    return next(iter(result.values()))


def prefill(queue: Queue, count: int) -> None:
    """`count` waiting jobs with ids 000000000000 ... (redis-benchmark's format)."""
    for start in range(0, count, 10 * ENQUEUE_CHUNK):
        ids = range(start, min(count, start + 10 * ENQUEUE_CHUNK))
        queue.enqueue_many([JobRequest("noop", 0.0, {"id": f"{i:012d}"}) for i in ids])


def python_round_trips(url: str, sha: str, call: ops.Call, n: int) -> dict[str, float]:
    """One redis-py connection: PING, and EVALSHA of a 1-job enqueue, sync and asyncio."""
    client = redis.Redis.from_url(url)
    out: dict[str, float] = {}
    start = time.perf_counter()
    for _ in range(n):
        client.ping()
    out["sync PING"] = n / (time.perf_counter() - start)
    argv = evalsha(call, sha)[1:]
    id_at = 3 + len(call.keys)  # sha, numkeys, KEYS, maxlen, then enqueue_new's first id
    start = time.perf_counter()
    for i in range(n):
        argv[id_at] = f"py-{i}"
        client.execute_command("EVALSHA", *argv)
    out["sync EVALSHA enqueue"] = n / (time.perf_counter() - start)
    client.close()

    async def run_async() -> None:
        aclient = redis.asyncio.Redis.from_url(url)
        start = time.perf_counter()
        for _ in range(n):
            await aclient.ping()
        out["asyncio PING"] = n / (time.perf_counter() - start)
        start = time.perf_counter()
        for i in range(n):
            argv[id_at] = f"apy-{i}"
            await aclient.execute_command("EVALSHA", *argv)
        out["asyncio EVALSHA enqueue"] = n / (time.perf_counter() - start)
        await aclient.aclose()

    asyncio.run(run_async())
    return out


def run_ceiling(url: str, args: argparse.Namespace) -> dict[str, Any]:
    parsed = urlparse(url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 6379
    n = args.ceiling_n
    count = args.claim_count
    client = redis.Redis.from_url(url)
    client.flushall()
    core = QueueCore(QUEUE, QueueSettings())
    shas = {name: client.script_load(s.source) for name, s in core.scripts.items()}
    detail: dict[str, Any] = {"n": n, "claim_count": count, "commands": {}, "scripts": {}}

    for mode, (clients, pipeline) in MODES.items():
        detail["commands"][mode] = benchmark(
            host, port, clients=clients, pipeline=pipeline, n=n, tests=COMMANDS, keyspace=100_000
        )
        xadd = ["XADD", "ceiling:stream", "MAXLEN", "~", "10000", "*", "event", "x", "id", RAND]
        detail["commands"][mode]["XADD"] = only(
            benchmark(host, port, clients=clients, pipeline=pipeline, n=n, command=xadd)
        )
        client.flushall()

    # enqueue, 1 job per call, random ids, as `Queue.enqueue("noop", 0.0)` sends it: a job
    # without options goes to enqueue_new (an id drawn twice is written over: as costly)
    one = ops.enqueue_new(core.keys, [(RAND, "noop", "0.0")], events_maxlen=EVENTS_MAXLEN)
    enqueue_1: dict[str, float] = {}
    for mode, (clients, pipeline) in MODES.items():
        enqueue_1[mode] = only(
            benchmark(host, port, clients=clients, pipeline=pipeline, n=n,
                      command=evalsha(one, shas["enqueue_new"]), keyspace=KEYSPACE)
        )  # fmt: skip
        created = int(client.zcard(core.keys.ready))
        if created < n * 0.99:
            raise RuntimeError(f"enqueue 1 job ({mode}): {created} of {n} jobs created")
        client.flushall()
    detail["scripts"]["enqueue 1 job"] = enqueue_1

    # enqueue, one enqueue_many chunk per call (enqueue_new, as for jobs without options)
    chunk = ops.enqueue_new(
        core.keys, [(RAND, "noop", "0.0")] * ENQUEUE_CHUNK, events_maxlen=EVENTS_MAXLEN
    )
    calls = max(4, n // ENQUEUE_CHUNK)
    rps = only(
        benchmark(host, port, clients=4, pipeline=1, n=calls,
                  command=evalsha(chunk, shas["enqueue_new"]), keyspace=KEYSPACE)
    )  # fmt: skip
    created = int(client.zcard(core.keys.ready))
    if created < calls * ENQUEUE_CHUNK * 0.99:
        raise RuntimeError(f"enqueue {ENQUEUE_CHUNK}/call: {created} jobs created")
    detail["scripts"][f"enqueue {ENQUEUE_CHUNK} jobs/call"] = {
        "jobs_per_s": created / (calls / rps),
        "jobs": created,
    }
    client.flushall()

    # claim `count` per call from a backlog of n jobs, then complete `count` per call
    queue = Queue(QUEUE, url=url)
    prefill(queue, n)
    claim = ops.claim(
        core.keys, worker_id=WORKER, count=count, lease_ms=3_600_000, token=TOKEN,
        promote=1000, events_maxlen=core.settings.events_maxlen,
    )  # fmt: skip
    claim_calls = max(1, n // count)
    rps = only(
        benchmark(host, port, clients=50, pipeline=1, n=claim_calls,
                  command=evalsha(claim, shas["claim"]))
    )  # fmt: skip
    claimed = int(client.zcard(core.keys.active))
    detail["scripts"][f"claim {count}/call"] = {
        "jobs_per_s": claimed / (claim_calls / rps),
        "jobs": claimed,
    }
    # ids drawn at random from the claimed ones: a fifth of them, so few are drawn
    # twice (a repeat is refused cheaply; only real completions are counted)
    complete = ops.complete(
        core.keys, [(RAND, TOKEN, "null")] * count, events_maxlen=core.settings.events_maxlen
    )
    complete_calls = max(1, claimed // count // 5)
    rps = only(
        benchmark(host, port, clients=50, pipeline=1, n=complete_calls,
                  command=evalsha(complete, shas["complete"]), keyspace=claimed)
    )  # fmt: skip
    completed = claimed - int(client.zcard(core.keys.active))
    detail["scripts"][f"complete {count}/call"] = {
        "jobs_per_s": completed / (complete_calls / rps),
        "jobs": completed,
    }
    queue.close()
    client.flushall()

    detail["redis_py"] = python_round_trips(url, shas["enqueue_new"], one, max(1000, n // 20))
    client.flushall()
    client.close()

    claim_rate = detail["scripts"][f"claim {count}/call"]["jobs_per_s"]
    complete_rate = detail["scripts"][f"complete {count}/call"]["jobs_per_s"]
    process = 1 / (1 / claim_rate + 1 / complete_rate)
    detail["allowed_jobs_per_s"] = {
        "process: claim + complete, 1 Redis core": process,
        "full cycle: enqueue 1/call + claim + complete": 1
        / (1 / enqueue_1["c50_P1"] + 1 / process),
        "enqueue_single, 1 connection, no pipelining": enqueue_1["c1_P1"],
        "enqueue_single, 50 connections": enqueue_1["c50_P1"],
        "enqueue_bulk: 500 jobs/call": detail["scripts"][f"enqueue {ENQUEUE_CHUNK} jobs/call"][
            "jobs_per_s"
        ],
    }
    return {"jobs_per_s": process, "detail": detail}

"""Flows, measured: a fan-out of N children and the fan-in to their parent, and M 4-step chains
(each step the parent of the one before), beside N plain jobs, on Conveyor and, when the peers'
virtualenv has it, on BullMQ's FlowProducer (the Python port, bench/peers/bullmq_flows.py).

    .venv/bin/python -m bench.flows [--children 10000] [--chains 10000] [--concurrency 50]

Each figure: jobs per second of processing (the enqueue is timed apart), and the Redis CPU time
per job (INFO commandstats, every command of the enqueue and the processing, divided by the
jobs): the cost a child adds over a plain job, free of the client's own time. One private
redis-server; Conveyor's worker is `conveyor worker --burst` in its own process. Figures from
a loaded machine are indicative only.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis

from bench.venv import peer_python
from conveyor import FlowJob, JobRequest, Queue
from conveyor.integrations.redis_server import RedisProcess

ROOT = Path(__file__).resolve().parent.parent
CONVEYOR = Path(sys.executable).parent / "conveyor"


def redis_usec(client: redis.Redis) -> int:
    """Microseconds of CPU Redis spent in commands so far (all of them)."""
    stats = client.info("commandstats")
    return sum(int(v["usec"]) for v in stats.values() if isinstance(v, dict))


def burst(url: str, queue: str, concurrency: int) -> float:
    """Seconds a burst worker takes to drain `queue`."""
    env = {**os.environ, "BENCH_REDIS_URL": url, "BENCH_FLOW_QUEUE": queue,
           "PYTHONPATH": str(ROOT)}  # fmt: skip
    started = time.monotonic()
    subprocess.run(
        [str(CONVEYOR), "worker", "bench.flow_tasks:tasks", "--url", url, "--burst",
         "--concurrency", str(concurrency)],
        cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return time.monotonic() - started


def measure(
    url: str, name: str, jobs: int, concurrency: int, enqueue: Callable[[Queue], object]
) -> dict[str, float]:
    client = redis.Redis.from_url(url)
    client.config_resetstat()
    with Queue(name, url=url) as queue:
        started = time.monotonic()
        enqueue(queue)
        enqueue_s = time.monotonic() - started
        process_s = burst(url, name, concurrency)
        waiting = queue.client.zcard(queue.core.keys.waiting_children)
        done = queue.client.zcard(queue.core.keys.completed)
    if waiting or done != jobs:
        raise SystemExit(f"{name}: {done} of {jobs} jobs completed, {waiting} parents waiting")
    usec = redis_usec(client)
    client.close()
    return {"jobs": jobs, "enqueue_s": enqueue_s, "process_s": process_s,
            "jobs_per_s": jobs / process_s, "redis_us_per_job": usec / jobs}  # fmt: skip


def chain(depth: int) -> FlowJob:
    node = FlowJob(task="noop")
    for _ in range(depth - 1):
        node = FlowJob(task="noop", children=[node])
    return node


def conveyor_runs(
    url: str, children: int, chains: int, concurrency: int
) -> dict[str, dict[str, float]]:
    plain = [JobRequest("noop", None) for _ in range(children)]
    fan = FlowJob(task="noop", children=[FlowJob(task="noop") for _ in range(children)])

    def chains_of_4(queue: Queue) -> None:
        for _ in range(chains):
            queue.enqueue_flow(chain(4))

    return {
        "plain jobs": measure(
            url, "plain", children, concurrency, lambda q: q.enqueue_many(plain, chunk_size=500)
        ),
        f"fan-out of {children} + fan-in": measure(
            url, "fan", children + 1, concurrency, lambda q: q.enqueue_flow(fan)
        ),
        f"{chains} chains of 4 steps": measure(url, "chains", 4 * chains, concurrency, chains_of_4),
    }


def bullmq_runs(
    url: str, children: int, chains: int, concurrency: int
) -> dict[str, dict[str, float]] | str:
    python = Path(os.environ.get("BENCH_BULLMQ_PYTHON") or peer_python())
    if not python.exists():
        return "no .venv-bench (make bench creates it): BullMQ not measured"
    done = subprocess.run(
        [str(python), "-m", "bench.peers.bullmq_flows", url, str(children), str(chains),
         str(concurrency)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    if done.returncode != 0:
        return f"BullMQ failed: {done.stderr.strip()[-500:]}"
    import json

    result: dict[str, dict[str, float]] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=10_000)
    parser.add_argument("--chains", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, RedisProcess(data_dir=tmp) as server:
        version = redis.Redis.from_url(server.url).info("server")["redis_version"]
        print(f"flows on Redis {version} (indicative: one machine, its load at the time)")
        runs = {"conveyor": conveyor_runs(server.url, args.children, args.chains, args.concurrency)}
        peer = bullmq_runs(server.url, args.children, args.chains, args.concurrency)
        if isinstance(peer, str):
            print(f"  {peer}")
        else:
            runs["bullmq"] = peer
    for system, figures in runs.items():
        for what, f in figures.items():
            print(
                f"  {system:9s} {what:34s} {f['jobs_per_s']:9.0f} jobs/s   "
                f"{f['redis_us_per_job']:6.1f} µs of Redis per job   "
                f"(enqueue {f['enqueue_s']:.2f} s, processing {f['process_s']:.2f} s)"
            )
    ours = runs["conveyor"]
    plain = next(iter(ours.values()))["redis_us_per_job"]
    for what, f in list(ours.items())[1:]:
        print(f"  conveyor: {what}: {f['redis_us_per_job'] / plain:.2f}x a plain job's Redis time")
    if "bullmq" in runs:
        for (what, f), g in zip(list(ours.items())[1:], runs["bullmq"].values(), strict=True):
            print(f"  {what}: Conveyor {f['jobs_per_s'] / g['jobs_per_s']:.1f}x BullMQ's jobs/s")


if __name__ == "__main__":
    main()

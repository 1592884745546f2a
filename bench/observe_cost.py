"""What observability costs, measured: the memory of a queue's metrics
history for a week, and the worker's CPU time per job for the hooks.

    .venv/bin/python -m bench.observe_cost [--tasks 1,10] [--jobs 200000]

A week is 169 hour keys of each kind (docs/protocol.md §14). Every minute is
busy (completed, failed and retried all counted) and every task fills every
run and wait time bucket: the most the history can hold. The hour keys are
written as record_metrics writes them, then measured with MEMORY USAGE.

The worker's CPU time per job is measured on a real worker (in this
process, burst mode, concurrency 100, a no-op async handler) draining N
jobs: with no hook at all (metrics history off), then with the default
metrics history, in alternation; CPU time rather than wall time, as the
machine is shared.

The time per job of the hook calls alone is that of the calls the worker's
job pool makes around a run that succeeds (pool.py `_execute_hooked` and `_tell_outcome`), with the
metrics recorder alone and with the job log lines too (to a discarding
handler), in this process: the worker's other work per job is not in it.
With no hook installed the pool makes none of these calls.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import tempfile
import time
from typing import Any

import redis

from conveyor.client.core import QueueCore
from conveyor.client.models import QueueSettings
from conveyor.hooks import Hook, Hooks
from conveyor.hooks import call as call_hooks
from conveyor.integrations.redis_server import RedisProcess
from conveyor.metrics import BOUNDS, RUN, WAIT
from conveyor.protocol.keys import QueueKeys
from conveyor.worker.context import JobContext
from conveyor.worker.job_lines import JobLines
from conveyor.worker.metrics import MetricsRecorder

HOURS = 7 * 24 + 1


def week_bytes(client: redis.Redis, tasks: int) -> tuple[int, int]:
    """Bytes of the counts keys and of the timings keys of a full week."""
    keys = QueueKeys("conveyor", f"bench-{tasks}")
    counts = timings = 0
    for hour in range(HOURS):
        client.hset(keys.metrics(hour), mapping={str(m): "1873 12 40" for m in range(60)})
        fields: dict[str, int] = {}
        maxima: dict[str, int] = {}
        for t in range(tasks):
            task = f"app.tasks.task_{t}"
            for kind in (RUN, WAIT):
                fields |= {f"{kind}{b}:{task}": 1000 + b for b in range(len(BOUNDS) + 1)}
                fields[f"{kind}s:{task}"] = 123_456_789_012
                maxima[f"{kind}:{task}"] = 1_234_567_890
        client.hset(keys.timings(hour), mapping=fields)
        client.hset(keys.timing_max(hour), mapping=maxima)
        for key in (keys.metrics(hour), keys.timings(hour), keys.timing_max(hour)):
            client.pexpire(key, 1000 * 3600 * 200)
        counts += int(client.memory_usage(keys.metrics(hour)) or 0)
        timings += int(client.memory_usage(keys.timings(hour)) or 0)
        timings += int(client.memory_usage(keys.timing_max(hour)) or 0)
    return counts, timings


def hook_cost_us(hooks: list[Hook], jobs: int) -> float:
    """µs per job of the hook calls around one successful run, made as the
    job pool makes them (pool.py)."""
    installed = Hooks(hooks)
    ctx = JobContext("id", "q", "task", None, 1, "t", "w", lambda *_: None, waited=0.002)
    started = time.perf_counter()
    for _ in range(jobs):
        if installed.before_run:
            call_hooks(installed.before_run, ctx)
        t0 = time.perf_counter()
        duration = time.perf_counter() - t0
        for method in installed.after_success:
            method(ctx, duration=duration)
        for method in installed.on_completed:
            method(ctx)
    return (time.perf_counter() - started) / jobs * 1e6


def worker_cpu_us(url: str, queue: str, jobs: int, **settings: Any) -> float:
    """CPU µs per job of a burst worker draining `jobs` no-op jobs."""
    from conveyor import Queue, Tasks
    from conveyor.worker import Worker, WorkerSettings

    tasks = Tasks(queue, url=url)

    @tasks.task
    async def noop(data: Any) -> None:
        return None

    with Queue(queue, url=url) as producer:
        producer.enqueue_many([("noop", None)] * jobs, chunk_size=1000)
    worker = Worker(tasks, url=url, settings=WorkerSettings(burst=True, concurrency=100,
                                                             **settings))  # fmt: skip
    started = time.process_time()
    asyncio.run(worker.run())
    return (time.process_time() - started) / jobs * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="1,10", help="task counts, comma-separated")
    parser.add_argument("--jobs", type=int, default=200_000, help="jobs timed per hook set")
    parser.add_argument("--worker-jobs", type=int, default=20_000, help="jobs per worker run")
    parser.add_argument("--reps", type=int, default=3, help="worker runs per case")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, RedisProcess(data_dir=tmp) as server:
        print(f"worker CPU per job, {args.worker_jobs} no-op jobs, median of {args.reps}:")
        cases: dict[str, list[float]] = {"no hook": [], "metrics history (default)": []}
        for rep in range(args.reps):
            cases["no hook"].append(
                worker_cpu_us(server.url, f"nohook{rep}", args.worker_jobs, metrics=False)
            )
            cases["metrics history (default)"].append(
                worker_cpu_us(server.url, f"metrics{rep}", args.worker_jobs)
            )
        for name, runs in cases.items():
            runs.sort()
            print(f"  {name:27s} {runs[len(runs) // 2]:6.1f} µs  (runs: "
                  f"{', '.join(f'{r:.1f}' for r in runs)})")  # fmt: skip
    recorder = MetricsRecorder(QueueCore("q", QueueSettings()))
    logging.getLogger("conveyor.jobs").addHandler(logging.NullHandler())
    logging.getLogger("conveyor.jobs").setLevel(logging.INFO)
    logging.getLogger("conveyor.jobs").propagate = False
    print("hook calls per job, in this process (indicative only on a loaded machine):")
    print(f"  metrics recorder:            {hook_cost_us([recorder], args.jobs):5.2f} µs")
    lines = hook_cost_us([recorder, JobLines()], args.jobs)
    print(f"  metrics + job lines (-v):    {lines:5.2f} µs")
    with tempfile.TemporaryDirectory() as tmp, RedisProcess(data_dir=tmp) as server:
        client = redis.Redis.from_url(server.url)
        version = client.info("server")["redis_version"]
        print(f"metrics history of one queue for a week (Redis {version}, worst case)")
        for tasks in (int(t) for t in args.tasks.split(",")):
            counts, timings = week_bytes(client, tasks)
            print(
                f"  {tasks:3d} task(s): counts {counts / 1024:7.1f} KiB, "
                f"timings {timings / 1024:8.1f} KiB, total {(counts + timings) / 1024:8.1f} KiB"
            )
        client.close()


if __name__ == "__main__":
    main()

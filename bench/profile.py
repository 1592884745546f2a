"""Profile Conveyor's hot paths on a private redis-server.

    .venv/bin/python -m bench.profile worker   [--n 50000] [--concurrency 100]
    .venv/bin/python -m bench.profile enqueue  [--n 20000]
    .venv/bin/python -m bench.profile enqueue_async
    .venv/bin/python -m bench.profile enqueue_bulk [--n 100000]

pyinstrument is used when importable (it is not a Conveyor dependency: put it on
PYTHONPATH from a scratch venv), else cProfile. `worker` drains a backlog with
an in-process Worker in burst mode, so the profile is of the real runtime with
its leases, heartbeats and events. For a sampling profile of a worker process
from outside, run py-spy against `conveyor worker ... --burst`:

    py-spy record -r 1000 -f raw -o worker.txt -- .venv/bin/conveyor worker \\
        bench.conveyor_adapter:tasks --url URL --concurrency 100 --burst
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from conveyor import AsyncQueue, JobRequest, Queue
from conveyor.client.tasks import Tasks
from conveyor.integrations.redis_server import RedisProcess, find_redis_server
from conveyor.worker import Worker, WorkerSettings


def profiled(fn: Callable[[], Any], out: Path, label: str) -> float:
    """Run fn under pyinstrument (or cProfile); write the report; return seconds."""
    try:
        from pyinstrument import Profiler  # type: ignore[import-not-found]
    except ImportError:
        Profiler = None  # noqa: N806
    start = time.perf_counter()
    if Profiler is not None:
        profiler = Profiler(interval=0.0005, async_mode="disabled")
        profiler.start()
        fn()
        profiler.stop()
        elapsed = time.perf_counter() - start
        out.write_text(profiler.output_text(unicode=True, show_all=False, color=False))
    else:
        prof = cProfile.Profile()
        prof.enable()
        fn()
        prof.disable()
        elapsed = time.perf_counter() - start
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(40)
        out.write_text(buf.getvalue())
    print(f"{label}: {elapsed:.2f} s (under the profiler); report in {out}")
    return elapsed


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.profile")
    p.add_argument("what", choices=["worker", "enqueue", "enqueue_async", "enqueue_bulk"])
    p.add_argument("--n", type=int, default=None)
    p.add_argument("--concurrency", type=int, default=100)
    p.add_argument("--out", default=None, help="report file (default: /tmp/...)")
    args = p.parse_args()
    n = args.n or {"worker": 50_000, "enqueue_bulk": 100_000}.get(args.what, 20_000)
    out = Path(args.out or f"/tmp/conveyor-profile-{args.what}.txt")
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisProcess(binary=find_redis_server(), data_dir=tmp).start()
        try:
            run(args.what, server.url, n, args.concurrency, out)
        finally:
            server.stop()


def run(what: str, url: str, n: int, concurrency: int, out: Path) -> None:
    client = redis.Redis.from_url(url)
    queue = Queue("bench", url=url)
    queue.check()
    if what == "enqueue":
        elapsed = profiled(lambda: [queue.enqueue("noop", 0.0) for _ in range(n)], out, what)
    elif what == "enqueue_bulk":
        jobs = [JobRequest("noop", 0.0)] * n
        elapsed = profiled(lambda: queue.enqueue_many(jobs), out, what)
    elif what == "enqueue_async":

        async def produce() -> None:
            aqueue = AsyncQueue("bench", url=url)
            for _ in range(n):
                await aqueue.enqueue("noop", 0.0)
            await aqueue.close()

        elapsed = profiled(lambda: asyncio.run(produce()), out, what)
    else:
        queue.enqueue_many([JobRequest("noop", 0.0)] * n)
        tasks = Tasks("bench", url=url)

        @tasks.task
        async def noop(data: Any) -> None:
            return None

        settings = WorkerSettings(concurrency=concurrency, burst=True)
        worker = Worker(tasks, url=url, settings=settings)
        elapsed = profiled(worker.run_sync, out, f"worker pid {os.getpid()}")
        assert worker.processed == n, (worker.processed, n)
    print(f"{what}: {n / elapsed:,.0f} jobs/s under the profiler")
    cpu = client.info("cpu")
    print(
        f"redis-server CPU so far: {float(cpu['used_cpu_user']) + float(cpu['used_cpu_sys']):.2f} s"
    )
    client.close()
    queue.close()


if __name__ == "__main__":
    main()

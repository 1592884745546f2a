"""Server time of every dashboard page with a million jobs in one queue.

    .venv/bin/python -m bench.dashboard [--jobs 1000000] [--reps 15]

Fills a private Redis (no persistence) with `--jobs` jobs in one queue:
70 % waiting (a tenth of them in 20 groups, a twentieth indexed by customer),
20 % delayed, 5 % completed and 5 % failed (claimed and ended by the protocol's
own scripts, as a worker would), then asks each page `--reps` times through
the ASGI app in process (no network, no browser: the time the app takes,
Redis round trips included) and prints the median, p95 and max per page.
Every page reads from the queue's indexes, never a scan: the figures should
not grow with the queue. Figures on a loaded machine are indicative only.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

import httpx

from conveyor import Queue
from conveyor.client.models import JobRequest
from conveyor.client.transport import SyncRunner
from conveyor.integrations.redis_server import RedisProcess
from conveyor.integrations.web import DashboardSettings, dashboard_app
from conveyor.protocol import ops

QUEUE = "bench-dash"
BUDGET_MS = 300.0


def fill(queue: Queue, jobs: int) -> None:
    """Enqueue `jobs` jobs in the mix above, in pipelined chunks."""
    waiting, delayed, ended = int(jobs * 0.7), int(jobs * 0.2), jobs - int(jobs * 0.9)
    plain = waiting - waiting // 10 - waiting // 20
    for start in range(0, plain, 100_000):
        queue.enqueue_many([("send", {"n": n}) for n in range(start, min(plain, start + 100_000))],
                           chunk_size=1000)  # fmt: skip
    queue.enqueue_many(
        [JobRequest("send", {"n": n}, {"group": f"tenant-{n % 20}"}) for n in range(waiting // 10)],
        chunk_size=1000,
    )
    queue.enqueue_many(
        [JobRequest("send", {"n": n}, {"index": {"customer": f"c{n % 100}"}})
         for n in range(waiting // 20)],
        chunk_size=1000,
    )  # fmt: skip
    queue.enqueue_many(
        [JobRequest("send", {"n": n}, {"delay": 3600 + n}) for n in range(delayed)],
        chunk_size=1000,
    )
    queue.enqueue_many(
        [JobRequest("charge", {"n": n}, {"max_failures": 1}) for n in range(ended)],
        chunk_size=1000,
    )
    end_claimed(queue, ended)


def end_claimed(queue: Queue, count: int) -> None:
    """Claim `count` jobs as a worker would and complete half, fail half for good."""
    runner = SyncRunner(queue.client, queue.core.scripts)
    keys, done = queue.core.keys, 0
    while done < count:
        claim = ops.claim(keys, worker_id="bench", count=min(1000, count - done),
                          lease_ms=600_000, token="t", promote=0, events_maxlen=10_000)  # fmt: skip
        jobs = ops.decode_claim(runner.run(claim)).jobs
        if not jobs:
            raise RuntimeError("nothing to claim: the fill went wrong")
        if (done // 1000) % 2:
            runner.run(ops.complete(keys, [(j.id, "t", "1") for j in jobs], events_maxlen=10_000))
        else:
            items = [ops.FailItem(j.id, "t", "Traceback: boom", True, None, 0.0) for j in jobs]
            runner.run(ops.fail(keys, items, events_maxlen=10_000))
        done += len(jobs)


def pages(queue: Queue) -> dict[str, str]:
    q = f"/queues/{QUEUE}"
    waiting = queue.counts()
    some_job = queue.job_ids("failed", limit=1)[0]
    deep = max(1, waiting["waiting"] // 2 // 50)
    return {
        "queues": "/",
        "queue": q,
        "queue, 7 days": f"{q}?range=7d",
        "waiting, page 1": f"{q}/jobs/waiting",
        f"waiting, page {deep}": f"{q}/jobs/waiting?page={deep}",
        "waiting, one group": f"{q}/jobs/waiting?group=tenant-3",
        "delayed": f"{q}/jobs/delayed",
        "completed": f"{q}/jobs/completed",
        "failed": f"{q}/jobs/failed",
        "failed, filtered": f"{q}/jobs/failed?error=boom&task=charge",
        "job": f"{q}/job?id={some_job}",
        "search by id": f"{q}/search?id={some_job}",
        "search by property": f"{q}/search?field=customer&value=c7",
        "workers": f"{q}/workers",
        "schedules": f"{q}/schedules",
        "audit": f"{q}/audit",
    }


async def measure(url: str, targets: dict[str, str], reps: int) -> dict[str, list[float]]:
    app = dashboard_app(DashboardSettings(url=url, queues=(QUEUE,)))
    transport = httpx.ASGITransport(app=app)
    times: dict[str, list[float]] = {}
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        for name, path in targets.items():
            await client.get(path)  # warm: connections, templates
            for _ in range(reps):
                start = time.perf_counter()
                answer = await client.get(path)
                times.setdefault(name, []).append((time.perf_counter() - start) * 1000)
                if answer.status_code not in (200, 303):
                    raise RuntimeError(f"{path}: {answer.status_code} {answer.text[:200]}")
    await app.state.queues.close()
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.dashboard", description=__doc__)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as data, RedisProcess(
        data_dir=data, appendonly=False
    ) as server, Queue(QUEUE, url=server.url) as queue:
        started = time.perf_counter()
        fill(queue, args.jobs)
        queue.schedule("nightly", "send", None, cron="0 3 * * *")
        counts = {s.value: n for s, n in queue.counts().items() if n}
        print(f"filled in {time.perf_counter() - started:.0f} s: {counts}")
        times = asyncio.run(measure(server.url, pages(queue), args.reps))
    print(f"\n{'page':<24} {'median ms':>10} {'p95 ms':>8} {'max ms':>8}")
    worst = 0.0
    for name, samples in times.items():
        ordered = sorted(samples)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        worst = max(worst, p95)
        print(f"{name:<24} {statistics.median(samples):>10.1f} {p95:>8.1f} {ordered[-1]:>8.1f}")
    verdict = "within" if worst < BUDGET_MS else "OVER"
    print(f"\nworst p95 {worst:.1f} ms: {verdict} the {BUDGET_MS:.0f} ms budget "
          f"({args.jobs:,} jobs; indicative on a shared machine)")  # fmt: skip


if __name__ == "__main__":
    main()

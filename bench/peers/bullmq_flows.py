"""BullMQ's FlowProducer (the Python port) on the flows of bench/flows.py: a fan-out of N
children and its fan-in, and M chains of 4 steps, each processed by one worker process of
`Worker(concurrency=C)`. Prints the figures as JSON.

    .venv-bench/bin/python -m bench.peers.bullmq_flows URL CHILDREN CHAINS CONCURRENCY
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import sys
import time
from typing import Any

import redis
from bullmq import FlowProducer, Queue, Worker


def redis_usec(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(int(v["usec"]) for v in stats.values() if isinstance(v, dict))


async def process(job: Any, token: str) -> None:
    return None


def _work(url: str, queue: str, concurrency: int, jobs: int) -> None:
    async def run() -> None:
        counter = Queue(queue, {"connection": url})
        worker = Worker(queue, process, {"connection": url, "concurrency": concurrency})
        while (await counter.getJobCounts("completed"))["completed"] < jobs:
            await asyncio.sleep(0.02)
        await worker.close()
        await counter.close()

    asyncio.run(run())


def chain(queue: str, depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {"name": "noop", "queueName": queue, "data": None}
    for _ in range(depth - 1):
        node = {"name": "noop", "queueName": queue, "data": None, "children": [node]}
    return node


async def measure(
    url: str, queue: str, jobs: int, flows: list[dict[str, Any]], concurrency: int
) -> dict[str, float]:
    client = redis.Redis.from_url(url)
    client.config_resetstat()
    producer = FlowProducer(url)
    started = time.monotonic()
    for i in range(0, len(flows), 100):
        await asyncio.gather(*(producer.add(f) for f in flows[i : i + 100]))
    enqueue_s = time.monotonic() - started
    await producer.close()
    started = time.monotonic()
    worker = multiprocessing.Process(target=_work, args=(url, queue, concurrency, jobs))
    worker.start()
    worker.join()
    process_s = time.monotonic() - started
    usec = redis_usec(client)
    client.close()
    return {
        "jobs": jobs,
        "enqueue_s": enqueue_s,
        "process_s": process_s,
        "jobs_per_s": jobs / process_s,
        "redis_us_per_job": usec / jobs,
    }


async def main(url: str, children: int, chains: int, concurrency: int) -> None:
    fan = {
        "name": "noop",
        "queueName": "fan",
        "data": None,
        "children": [{"name": "noop", "queueName": "fan", "data": None} for _ in range(children)],
    }
    out = {
        f"fan-out of {children} + fan-in": await measure(
            url, "fan", children + 1, [fan], concurrency
        ),
        f"{chains} chains of 4 steps": await measure(
            url, "chains", 4 * chains, [chain("chains", 4) for _ in range(chains)], concurrency
        ),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))

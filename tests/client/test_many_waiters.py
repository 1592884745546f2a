"""Thousands of wait_result calls on one client (issue 18): they share one
blocking connection instead of one pooled connection each, so a shared
client neither runs out of connections nor fails its other calls."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis

from conveyor import AsyncQueue, JobRequest, Queue, QueueSettings
from conveyor.client.transport import SyncRunner
from conveyor.client.waits import _Follow
from conveyor.errors import ConnectionLostError, UncertainWriteError, WaitTimeoutError
from conveyor.protocol import ops
from conveyor.protocol.keys import QueueKeys
from support.cluster import cluster_url, start_cluster
from support.servers import ServerFactory


def finish_all(core: Any, redis_client: redis.Redis, count: int) -> None:
    """Claim `count` jobs and complete each with its own data, as a worker would."""
    runner = SyncRunner(redis_client, core.scripts)
    claim = ops.claim(
        core.keys, worker_id="w", count=count, lease_ms=60_000, token="tok", promote=10,
        events_maxlen=100,
    )  # fmt: skip
    jobs = ops.decode_claim(runner.run(claim)).jobs
    assert len(jobs) == count
    done = [(job.id, "tok", f'{{"n": {job.id[1:]}}}') for job in jobs]
    for start in range(0, count, 500):
        runner.run(ops.complete(core.keys, done[start : start + 500], events_maxlen=100))


def test_300_threads_wait_on_one_queue(
    redis_url: str, queue_name: str, redis_client: redis.Redis
) -> None:
    count = 300
    with Queue(queue_name, url=redis_url) as queue:
        ids = [queue.enqueue("t", None, id=f"j{i}").id for i in range(count)]
        with ThreadPoolExecutor(count) as pool:
            waits = [pool.submit(queue.wait_result, job_id, timeout=60) for job_id in ids]
            # more than the pool's 100 connections are waiting before any job ends
            finisher = threading.Timer(1.0, finish_all, (queue.core, redis_client, count))
            finisher.start()
            results = [w.result(90) for w in waits]
            finisher.join()
        assert results == [{"n": i} for i in range(count)]
        assert queue.get("j0") is not None  # the client still serves everything else
        assert sum(queue.counts().values()) == count


def test_2000_tasks_wait_on_one_async_queue(
    redis_url: str, queue_name: str, redis_client: redis.Redis
) -> None:
    count = 2000

    async def main() -> list[Any]:
        async with AsyncQueue(queue_name, url=redis_url) as queue:
            jobs = [JobRequest("t", None, {"id": f"j{i}"}) for i in range(count)]
            ids = [r.id for r in await queue.enqueue_many(jobs)]
            waits = [asyncio.ensure_future(queue.wait_result(i, timeout=60)) for i in ids]
            await asyncio.sleep(0.5)
            await asyncio.to_thread(finish_all, queue.core, redis_client, count)
            results = await asyncio.gather(*waits)
            assert await queue.get(ids[0]) is not None
            return results

    assert asyncio.run(main()) == [{"n": i} for i in range(count)]


def test_a_wait_still_times_out(redis_url: str, queue_name: str) -> None:
    with Queue(queue_name, url=redis_url) as queue:
        job = queue.enqueue("t", None)
        with pytest.raises(WaitTimeoutError):
            queue.wait_result(job.id, timeout=0.3)


def test_an_exhausted_pool_is_not_an_uncertain_write(redis_url: str, queue_name: str) -> None:
    async def main() -> None:
        settings = QueueSettings(max_connections=2)
        async with AsyncQueue(queue_name, url=redis_url, settings=settings) as queue:
            with pytest.raises(ConnectionLostError) as raised:
                await asyncio.gather(*(queue.counts() for _ in range(20)))
            assert not isinstance(raised.value, UncertainWriteError)
            assert "nothing was sent" in str(raised.value)
            assert "max_connections" in str(raised.value)

    asyncio.run(main())


def test_waits_on_a_cluster_queue(server_factory: ServerFactory) -> None:
    nodes = start_cluster(server_factory, masters=3)
    with Queue("waits", url=cluster_url(nodes)) as queue:
        ids = [queue.enqueue("t", None, id=f"j{i}").id for i in range(20)]
        with ThreadPoolExecutor(20) as pool:
            waits = [pool.submit(queue.wait_result, job_id, timeout=60) for job_id in ids]
            finish_all(queue.core, queue.client, 20)  # over the routed connection
            assert [w.result(90) for w in waits] == [{"n": i} for i in range(20)]


def test_waiters_survive_a_redis_restart(server_factory: ServerFactory) -> None:
    """The hub reconnects and looks every waiter up again (a sweep): a job
    that ends after Redis came back reaches the waiters that waited across."""
    server = server_factory(appendonly=True, appendfsync="always")
    with Queue("restart", url=server.url) as queue:
        ids = [queue.enqueue("t", None, id=f"j{i}").id for i in range(5)]
        with ThreadPoolExecutor(5) as pool:
            waits = [pool.submit(queue.wait_result, job_id, timeout=60) for job_id in ids]
            time.sleep(0.5)  # every waiter is in, the hub follows the stream
            server.restart()
            with redis.Redis.from_url(server.url) as direct:
                finish_all(queue.core, direct, 5)
            assert [w.result(90) for w in waits] == [{"n": i} for i in range(5)]


def test_a_gap_in_the_stream_is_noticed() -> None:
    """The stream's first entry newer than the last one read: entries may
    have been trimmed unseen, so every waiter is looked up again."""
    follow = _Follow(QueueKeys("p", "q"))
    follow.start([(b"5-0", {})])
    entry = [(b"q", [(b"9-0", {b"event": b"completed", b"id": b"a"})])]
    assert follow.read(entry, [(b"5-0", {})], ["a"]) == ({"a"}, False)
    assert follow.last == "9-0"
    later = [(b"q", [(b"20-0", {b"event": b"completed", b"id": b"b"})])]
    assert follow.read(later, [(b"12-0", {})], ["a"]) == (set(), True)  # 10-0 .. 11-x trimmed

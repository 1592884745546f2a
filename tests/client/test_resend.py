"""An enqueue whose reply is lost is sent again by the client itself.

The first send of jobs with generated ids and no options goes to enqueue_new, which looks
nothing up; its re-send must go to enqueue, which tells the jobs that got in (`exists`) from
those that did not. Through a proxy that drops Redis's replies (and resets the connection) for
a moment: every job is in Redis exactly once, with one `created` event.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from conveyor import AsyncQueue, JobRequest, Queue
from conveyor.client.events import decode_entries

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from chaos.proxy import FaultProxy  # noqa: E402


@pytest.fixture
def proxy(redis_url: str) -> Iterator[FaultProxy]:
    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    with FaultProxy(port, seed=7) as fault_proxy:
        yield fault_proxy


def _lose_replies_for(proxy: FaultProxy, seconds: float) -> None:
    """Drop Redis's replies from now until `seconds` after the first one dropped (10 s at
    most): a window fixed from now could end before a slow host sends any reply (a bulk
    enqueue of 1,200 jobs in a loaded `make test`: none cut), and the test would prove
    nothing."""
    proxy.lose_replies(1.0)

    def restore() -> None:
        deadline = time.monotonic() + 10
        while proxy.replies_cut == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(seconds)
        proxy.lose_replies(0.0)

    threading.Thread(target=restore, daemon=True).start()


def _created_events(client: redis.Redis, queue: str) -> list[str]:
    entries = client.xrange(f"conveyor:{{{queue}}}:events")
    return [e.job_id for e in decode_entries(entries) if e.name == "created"]


def _check_once_each(client: redis.Redis, queue: str, ids: list[str]) -> None:
    assert sorted(m.decode() for m in client.zrange(f"conveyor:{{{queue}}}:ready", 0, -1)) == (
        sorted(ids)
    )
    assert sorted(_created_events(client, queue)) == sorted(ids)
    assert client.hget(f"conveyor:{{{queue}}}:meta", "seq") == str(len(ids)).encode()


def test_a_lost_reply_to_a_single_enqueue_is_resent_through_enqueue(
    proxy: FaultProxy, redis_client: redis.Redis, queue_name: str
) -> None:
    with Queue(queue_name, url=proxy.url) as queue:
        queue.enqueue("t", 0)  # connected, script loaded: the lost reply is the enqueue's
        _lose_replies_for(proxy, 0.2)
        done = queue.enqueue("t", 1)
    assert proxy.replies_cut >= 1
    assert done.outcome in ("created", "exists")  # `exists`: the first send got in
    first = redis_client.zrange(f"conveyor:{{{queue_name}}}:ready", 0, 0)[0].decode()
    _check_once_each(redis_client, queue_name, [first, done.id])


def test_a_lost_reply_to_a_bulk_enqueue_is_resent_through_enqueue(
    proxy: FaultProxy, redis_client: redis.Redis, queue_name: str
) -> None:
    with Queue(queue_name, url=proxy.url) as queue:
        queue.enqueue("t", 0)
        _lose_replies_for(proxy, 0.2)
        done = queue.enqueue_many([JobRequest("t", n) for n in range(1, 1201)], chunk_size=500)
    assert proxy.replies_cut >= 1
    assert {e.outcome for e in done} <= {"created", "exists"}
    first = redis_client.zrange(f"conveyor:{{{queue_name}}}:ready", 0, 0)[0].decode()
    _check_once_each(redis_client, queue_name, [first, *(e.id for e in done)])


def test_a_lost_reply_to_an_async_enqueue_is_resent_through_enqueue(
    proxy: FaultProxy, redis_client: redis.Redis, queue_name: str
) -> None:
    async def main() -> str:
        queue = AsyncQueue(queue_name, url=proxy.url)
        try:
            await queue.enqueue("t", 0)
            _lose_replies_for(proxy, 0.2)
            return (await queue.enqueue("t", 1)).id
        finally:
            await queue.close()

    job_id = asyncio.run(main())
    assert proxy.replies_cut >= 1
    first = redis_client.zrange(f"conveyor:{{{queue_name}}}:ready", 0, 0)[0].decode()
    _check_once_each(redis_client, queue_name, [first, job_id])

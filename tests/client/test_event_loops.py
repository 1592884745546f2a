"""An AsyncQueue used on more than one event loop (issue 18): a second
`asyncio.run`, or a test client's loop per test, must work on the new loop;
a loop that still runs elsewhere gets a clear error at once, never a hang."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from conveyor import AsyncQueue, Tasks
from conveyor.errors import ConfigurationError


async def round_trip(queue: AsyncQueue) -> Any:
    """A script over the lean wire and a read over redis-py, bounded in time."""

    async def both() -> Any:
        job = await queue.enqueue("t", {"n": 1})
        found = await queue.get(job.id)
        assert found is not None and found.data == {"n": 1}
        return await queue.counts()

    return await asyncio.wait_for(both(), 10)


def test_a_queue_follows_a_second_asyncio_run(redis_url: str, queue_name: str) -> None:
    queue = AsyncQueue(queue_name, url=redis_url)
    asyncio.run(round_trip(queue))
    counts = asyncio.run(round_trip(queue))  # hung forever on the lean wire
    assert sum(counts.values()) == 2
    asyncio.run(queue.close())


def test_a_cached_tasks_queue_works_in_each_new_loop(redis_url: str, queue_name: str) -> None:
    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task
    async def t(data: dict[str, int]) -> None: ...

    for _ in range(3):  # as with one TestClient per test
        asyncio.run(asyncio.wait_for(t.aenqueue({"n": 1}), 10))
    assert asyncio.run(round_trip(tasks.async_queue())) is not None


def test_a_loop_still_running_elsewhere_is_refused_at_once(
    redis_url: str, queue_name: str
) -> None:
    queue = AsyncQueue(queue_name, url=redis_url)
    other = asyncio.new_event_loop()
    thread = threading.Thread(target=other.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(round_trip(queue), other).result(15)
        with pytest.raises(ConfigurationError, match="one AsyncQueue per event loop"):
            asyncio.run(asyncio.wait_for(queue.enqueue("t", 1), 10))
    finally:
        asyncio.run_coroutine_threadsafe(queue.close(), other).result(15)
        other.call_soon_threadsafe(other.stop)
        thread.join(10)
        other.close()

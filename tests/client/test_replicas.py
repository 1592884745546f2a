"""min_replicas on a plain master with one replica: what an enqueue reports
when its first WAIT saw too few replicas and the client's own re-send (a
replay on the same master) then got the replica's acknowledgement."""

from __future__ import annotations

import asyncio
import threading

import pytest

from conveyor import AsyncQueue, Queue
from conveyor.client.models import QueueSettings
from conveyor.integrations.redis_server import RedisProcess
from support.replicas import master_with_replica, stopped_for
from support.servers import ServerFactory

# The first WAIT (0.2 s) ends while the replica is stopped; it wakes after
# 0.5 s, so a later re-send's WAIT is confirmed (re-sends come 0.05, 0.25, 1 s apart).
SETTINGS = QueueSettings(min_replicas=1, replica_timeout=0.2)
STOPPED = 0.5


@pytest.fixture
def master(server_factory: ServerFactory) -> tuple[RedisProcess, RedisProcess]:
    return master_with_replica(server_factory)


def _stopped(replica: RedisProcess) -> threading.Timer:
    return stopped_for(replica, STOPPED)


@pytest.mark.parametrize("options", [{}, {"id": "given"}, {"priority": 5}])
def test_a_job_created_by_the_first_send_is_reported_created(
    master: tuple[RedisProcess, RedisProcess], options: dict[str, object]
) -> None:
    primary, replica = master
    with Queue("orders", url=primary.url, settings=SETTINGS) as queue:
        queue.enqueue("warm", 0)  # connected, checked, scripts loaded
        resume = _stopped(replica)
        try:
            done = queue.enqueue("t", 1, **options)  # type: ignore[arg-type]
        finally:
            resume.join()
        assert done.outcome == "created"
        assert queue.counts()["waiting"] == 2  # applied once


def test_many_jobs_created_by_the_first_send_are_reported_created(
    master: tuple[RedisProcess, RedisProcess],
) -> None:
    primary, replica = master
    with Queue("orders", url=primary.url, settings=SETTINGS) as queue:
        queue.enqueue("warm", 0)
        resume = _stopped(replica)
        try:
            done = queue.enqueue_many([("t", n) for n in range(5)], chunk_size=2)
        finally:
            resume.join()
    assert [e.outcome for e in done] == ["created"] * 5


def test_a_job_created_by_the_first_send_is_reported_created_async(
    master: tuple[RedisProcess, RedisProcess],
) -> None:
    primary, replica = master

    async def enqueue() -> str:
        async with AsyncQueue("orders", url=primary.url, settings=SETTINGS) as queue:
            await queue.enqueue("warm", 0)
            resume = _stopped(replica)
            try:
                return (await queue.enqueue("t", 1, id="given")).outcome
            finally:
                await asyncio.to_thread(resume.join)

    assert asyncio.run(enqueue()) == "created"

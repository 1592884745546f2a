"""`conveyor migrate` (docs/protocol.md §10): a queue written by protocol
version 3's own scripts (tests/data/protocol3) is upgraded in place with jobs
in every state, while a version 4 worker started before waits, then runs
everything to its end."""

from __future__ import annotations

import json
import time

import pytest
import redis
from click.testing import CliRunner

from conveyor import AsyncQueue, JobState, Queue, Tasks
from conveyor.errors import MigrationRefusedError, ProtocolVersionError
from conveyor.integrations.cli import main
from conveyor.protocol.keys import QueueKeys
from support.protocol3 import Version3
from support.workers import WorkerRunner, wait_until

WINDOW = 10**10  # ms: a fixed window that does not roll over during the test


def _now_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _version3_queue(client: redis.Redis, name: str) -> Version3:
    """Jobs finished, failed, retrying, running (leased by a live old worker),
    waiting (alone and in a rate-limited group), delayed and a schedule."""
    v3 = Version3(client, name)
    client.hset(v3.k.meta, mapping={"rate": 50, "window": WINDOW})
    client.hset(v3.k.group_conf("g"), mapping={"rate": 50, "window": WINDOW})
    for job_id in ("a-done", "a-fail", "a-retry", "a-active"):
        assert v3.enqueue(job_id, "work") == "created"
    v3.enqueue("ga", "work", opts="group=g")
    assert sorted(v3.claim("old", 10, 1500)) == ["a-active", "a-done", "a-fail", "a-retry", "ga"]
    assert v3.complete("a-done", '"v3 result"') == [1]
    assert v3.complete("ga", '"v3 group"') == [1]
    assert v3.fail("a-fail", "bad", permanent=True) == ["failed"]
    assert v3.fail("a-retry", "flaky", permanent=False)[0] in ("retried", "delayed")
    v3.enqueue("w1", "work", data='{"n": 1}')
    v3.enqueue("g2", "work", opts="group=g")
    v3.enqueue("d1", "work", opts="delay=1500")
    v3.first_tick = _now_ms(client) + 300
    v3.schedule("tick", "work", v3.first_tick, 60_000)
    v3.heartbeat("old", 60_000)  # the old worker answers the roll call
    return v3


def test_a_version_3_queue_is_migrated_and_a_waiting_version_4_worker_runs_it(
    redis_url: str, redis_client: redis.Redis, queue_name: str, worker_runner: WorkerRunner
) -> None:
    v3 = _version3_queue(redis_client, queue_name)
    queue = Queue(queue_name, url=redis_url)
    assert queue.overview().protocol_version == 3
    with pytest.raises(ProtocolVersionError, match=f"conveyor migrate {queue_name}"):
        queue.enqueue("work")

    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task()
    async def work(data: object) -> str:
        return "v4 ran"

    worker_runner.start(tasks)
    time.sleep(1.5)  # the new worker refuses the version 3 queue: it runs nothing
    assert redis_client.hget(v3.k.job("w1"), "state") == b"waiting"

    with pytest.raises(MigrationRefusedError, match="1 worker"):
        queue.migrate()
    assert redis_client.hget(v3.k.meta, "version") == b"3"  # refused: nothing changed
    assert redis_client.get(v3.k.base + f"rate:{_now_ms(redis_client) // WINDOW}") == b"5"

    report = queue.migrate(force=True, batch=1)  # the old worker is known dead
    assert (report.found, report.version, report.migrated) == (3, 4, True)
    assert report.rate_windows == 2  # the queue's window and group g's
    assert report.groups == 1 and report.calls == 2
    assert redis_client.get(v3.k.base + f"rate:{_now_ms(redis_client) // WINDOW}") is None
    assert redis_client.zcard(v3.k.base + "rate") >= 5  # the 5 version 3 leases, logged
    assert redis_client.zcard(v3.k.base + "grate:g") >= 1
    again = queue.migrate()
    assert (again.found, again.migrated) == (4, False)  # idempotent

    expected = {
        "a-done": (JobState.COMPLETED, "v3 result"),
        "ga": (JobState.COMPLETED, "v3 group"),
        "a-fail": (JobState.FAILED, None),
        **{i: (JobState.COMPLETED, "v4 ran") for i in ("a-retry", "a-active", "w1", "g2", "d1")},
    }

    def ended() -> bool:
        jobs = {i: queue.get(i) for i in expected}
        return all(j is not None and (j.state, j.result) == expected[i] for i, j in jobs.items())

    wait_until(ended, timeout=60)
    active = queue.get("a-active")
    assert active is not None and active.stalls == 1  # its old lease ran out: run again
    assert queue.get("a-fail").error == "bad"  # type: ignore[union-attr]
    tick = wait_until(lambda: queue.get(f"tick@{v3.first_tick}"), timeout=30)
    assert (tick.state, tick.result) == (JobState.COMPLETED, "v4 ran")  # the schedule's tick
    ticks = [s for s in queue.schedules() if s.id == "tick"]
    assert ticks and ticks[0].job_id != tick.id  # ... and its next tick is pending
    queue.close()


def test_the_cli_shows_the_version_and_migrates(
    redis_url: str, redis_client: redis.Redis, queue_name: str
) -> None:
    _version3_queue(redis_client, queue_name)
    cli = CliRunner()
    info = cli.invoke(main, ["info", queue_name, "--url", redis_url])
    assert info.exit_code == 0, info.output
    assert json.loads(info.stdout)["protocol_version"] == 3
    refused = cli.invoke(main, ["migrate", queue_name, "--url", redis_url])
    assert refused.exit_code == 1 and "roll call" in refused.output
    done = cli.invoke(main, ["migrate", queue_name, "--force", "--json", "--url", redis_url])
    assert done.exit_code == 0, done.output
    shown = json.loads(done.stdout)
    assert (shown["found"], shown["version"], shown["migrated"]) == (3, 4, True)
    states = ("waiting", "active", "delayed", "completed", "failed")
    counts = {k: shown["counts"][k] for k in states}
    assert counts == {"waiting": 2, "active": 1, "delayed": 3, "completed": 2, "failed": 1}
    rows = json.loads(cli.invoke(main, ["queues", "--json", "--url", redis_url]).stdout)
    assert [r["protocol_version"] for r in rows if r["queue"] == queue_name] == [4]


def test_migrate_refuses_a_queue_of_another_version(
    redis_url: str, redis_client: redis.Redis, queue_name: str
) -> None:
    queue = Queue(queue_name, url=redis_url)
    redis_client.hset(queue.core.keys.meta, "version", 2)
    with pytest.raises(ProtocolVersionError, match="drain"):
        queue.migrate()
    assert redis_client.hget(queue.core.keys.meta, "version") == b"2"
    queue.close()


def test_the_version_error_says_what_to_do(
    redis_url: str, redis_client: redis.Redis, queue_name: str
) -> None:
    Version3(redis_client, queue_name)
    with Queue(queue_name, url=redis_url) as queue, pytest.raises(ProtocolVersionError) as caught:
        queue.enqueue("work")
    said = str(caught.value)
    assert "protocol version 3" in said and "speaks 4" in said
    assert f"`conveyor migrate {queue_name}`" in said and "drain" in said
    assert redis_client.hget(queue.core.keys.meta, "version") == b"3"


async def test_the_async_client_migrates_too(
    redis_url: str, redis_client: redis.Redis, queue_name: str
) -> None:
    v3 = _version3_queue(redis_client, queue_name)
    redis_client.delete(v3.k.workers)  # the old worker left the roll call
    async with AsyncQueue(queue_name, url=redis_url) as queue:
        report = await queue.migrate()
        assert (report.found, report.migrated, report.rate_windows) == (3, True, 2)
        assert report.counts[JobState.WAITING] == 2
        assert (await queue.migrate()).migrated is False
        assert (await queue.get("w1")) is not None


def test_a_worker_stops_on_a_queue_of_a_newer_version(
    redis_url: str, redis_client: redis.Redis, queue_name: str, worker_runner: WorkerRunner
) -> None:
    redis_client.hset(QueueKeys("conveyor", queue_name).meta, "version", 5)
    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task()
    async def work(data: object) -> None:
        return None

    running = worker_runner.start(tasks)
    wait_until(lambda: not running.thread.is_alive(), timeout=30)  # no migration brings 5 to 4
    assert isinstance(running.error, ProtocolVersionError) and running.error.found == "5"
    assert "upgrade this client" in str(running.error) and "migrate" not in str(running.error)

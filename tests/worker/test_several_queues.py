"""Several queues per worker: strict and weighted order, one blocking wait
across the queues, each task on its own queue, and `conveyor worker --queues`."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from conveyor import JobState, Queue
from conveyor.client.cluster import key_slot
from conveyor.client.tasks import Tasks
from conveyor.errors import ConfigurationError, JobFailedError
from conveyor.integrations.cli import main
from conveyor.protocol.keys import QueueKeys
from conveyor.worker import Worker, WorkerSettings
from support.cluster import cluster_url, start_cluster
from support.servers import ServerFactory
from support.workers import APPS, SRC, WorkerRunner, wait_until


class Three:
    """Tasks of queues high, default and low; every run noted in order."""

    def __init__(self, url: str, base: str) -> None:
        self.names = [f"{base}-high", f"{base}-default", f"{base}-low"]
        self.tasks = [Tasks(name, url=url) for name in self.names]
        self.runs: list[str] = []
        self._lock = threading.Lock()
        for tasks, short in zip(self.tasks, ("high", "default", "low"), strict=True):
            tasks.task(name=f"in_{short}")(self._noter(short))
        self.queues = [Queue(name, url=url) for name in self.names]

    def _noter(self, short: str) -> Any:
        async def note(data: int) -> None:
            with self._lock:
                self.runs.append(short)

        return note

    def fill(self, **per_queue: int) -> None:
        for queue, short in zip(self.queues, ("high", "default", "low"), strict=True):
            count = per_queue.get(short, 0)
            if count:
                queue.enqueue_many([(f"in_{short}", i) for i in range(count)])

    def close(self) -> None:
        for queue in self.queues:
            queue.close()


@pytest.fixture
def three(redis_url: str, queue_name: str) -> Iterator[Three]:
    made = Three(redis_url, queue_name)
    yield made
    made.close()


def test_strict_order_runs_a_queue_only_when_those_before_it_are_empty(
    three: Three, worker_runner: WorkerRunner
) -> None:
    three.fill(low=20, default=20, high=20)  # the lowest first: order is not arrival
    worker_runner.start(three.tasks, concurrency=1)
    wait_until(lambda: len(three.runs) == 60, timeout=60)
    assert three.runs == ["high"] * 20 + ["default"] * 20 + ["low"] * 20


def test_strict_order_with_a_batch_per_claim(three: Three, worker_runner: WorkerRunner) -> None:
    three.fill(low=100, high=100)
    worker_runner.start(three.tasks, concurrency=8)
    wait_until(lambda: len(three.runs) == 200, timeout=60)
    assert three.runs.index("low") >= 100, "a low job ran while high ones waited"


def test_weighted_order_shares_claims_in_proportion(
    three: Three, worker_runner: WorkerRunner
) -> None:
    three.fill(high=300, default=300, low=300)
    worker_runner.start(three.tasks, concurrency=3, weights=(5, 3, 1))
    wait_until(lambda: len(three.runs) >= 450, timeout=60)
    first = Counter(three.runs[:450])  # every queue still has jobs by then
    # 5:3:1 of 450 is 250, 150 and 50; a claim takes up to 3 jobs of one queue
    assert abs(first["high"] - 250) <= 15, first
    assert abs(first["default"] - 150) <= 15, first
    assert abs(first["low"] - 50) <= 10, first


def test_weighted_order_gives_an_empty_queue_no_credit(
    three: Three, worker_runner: WorkerRunner
) -> None:
    three.fill(high=200)
    worker_runner.start(three.tasks, concurrency=2, weights=(1, 1, 1))
    wait_until(lambda: len(three.runs) == 200, timeout=60)
    three.runs.clear()  # low sat empty through 200 high claims
    for queue in three.queues:  # both filled before the worker sees either (a busy host
        queue.pause()  # enqueues the second hundred long after the first)
    three.fill(high=100, low=100)
    for queue in three.queues:
        queue.resume()
    wait_until(lambda: len(three.runs) >= 100, timeout=60)
    first = Counter(three.runs[:100])
    assert abs(first["high"] - 50) <= 8, first  # not 100 low ones first to catch up


def test_an_idle_worker_blocks_on_all_its_queues_and_wakes_on_any(
    three: Three, worker_runner: WorkerRunner, redis_client: Any
) -> None:
    handle = worker_runner.start(three.tasks, concurrency=2)  # idle_wait 30 s
    wait_until(lambda: all(q.workers() for q in three.queues))  # every first beat done
    time.sleep(0.5)

    def script_calls() -> int:
        stats = redis_client.info("commandstats")
        return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))

    before = script_calls()
    time.sleep(1.0)
    calls = script_calls() - before
    # blocked: only the heartbeats and reaps of three queues (every 10 s here);
    # a worker polling its three queues would claim many times a second
    assert calls < 10, f"{calls} script calls in 1 s by an idle worker of three queues"
    for short, queue in zip(("low", "default", "high"), reversed(three.queues), strict=True):
        started = time.monotonic()
        queue.enqueue(f"in_{short}", 1)
        wait_until(lambda s=short: s in three.runs, timeout=10)  # idle_wait is 30 s
        assert time.monotonic() - started < 10
    started = time.monotonic()
    handle.stop()  # stopping ends the shared wait at once, too
    assert time.monotonic() - started < 10


def test_a_wake_taken_for_a_queue_not_claimed_from_is_handed_on(
    redis_url: str, queue_name: str, worker_runner: WorkerRunner, redis_client: Any
) -> None:
    """The multi-queue worker takes `high`'s marker but claims `low` (first in
    its strict order) with its only slot: the single-queue worker of `high`,
    blocked behind it, must be woken for the `high` job, not sit out its wait."""
    low_tasks = Tasks(f"{queue_name}-low", url=redis_url)
    high_tasks = Tasks(f"{queue_name}-high", url=redis_url)
    release = threading.Event()
    ran: list[str] = []

    @low_tasks.task
    def slow(data: int) -> None:
        ran.append("low")
        release.wait(30)

    @high_tasks.task
    async def quick(data: int) -> None:
        ran.append("high")

    def blocked() -> int:
        return int(redis_client.info("clients")["blocked_clients"])

    with (
        Queue(low_tasks.queue_name, url=redis_url) as low,
        Queue(high_tasks.queue_name, url=redis_url) as high,
    ):
        before = blocked()
        low.pause()
        low.enqueue("slow", 1)
        worker_runner.start([low_tasks, high_tasks], concurrency=1)  # idle_wait 30 s
        wait_until(lambda: blocked() == before + 1 and not redis_client.zcard(low.core.keys.marker))
        redis_client.hdel(low.core.keys.meta, "paused")  # low has a job now, and no marker
        worker_runner.start(high_tasks, concurrency=1)  # blocks after the first: served second
        wait_until(lambda: blocked() == before + 2)
        try:
            high.enqueue("quick", 1)  # its marker goes to the first worker, which claims low
            wait_until(lambda: "low" in ran and "high" in ran, timeout=10)
        finally:
            release.set()


def test_an_abort_reaches_the_job_through_its_own_queues_wake_key(
    three: Three, worker_runner: WorkerRunner
) -> None:
    started = threading.Event()

    @three.tasks[2].task
    async def forever(data: None) -> None:
        started.set()
        await asyncio.sleep(300)

    job = forever.enqueue(None)
    worker_runner.start(three.tasks, lease=90.0)  # a beat every 30 s: only the wake is fast
    assert started.wait(20)
    asked = time.monotonic()
    assert three.queues[2].abort(job.id) == "aborting"
    with pytest.raises(JobFailedError, match="AbortedError"):
        three.queues[2].wait_result(job.id, timeout=20)
    assert time.monotonic() - asked < 10  # not the heartbeat's 30 s


def test_a_task_runs_only_on_the_queue_it_is_registered_on(
    three: Three, worker_runner: WorkerRunner
) -> None:
    worker_runner.start(three.tasks, concurrency=2)
    wrong = three.queues[2].enqueue("in_high", 1)  # a high task, enqueued by name on low
    right = three.queues[0].enqueue("in_high", 2)
    wait_until(lambda: three.runs == ["high"], timeout=10)
    wait_until(lambda: three.queues[2].counts()[JobState.FAILED] == 1, timeout=10)
    failed = three.queues[2].get(wrong.id)
    assert failed is not None and "UnknownTaskError" in (failed.error or "")
    wait_until(lambda: three.queues[0].counts()[JobState.COMPLETED] == 1, timeout=10)
    done = three.queues[0].get(right.id)
    assert done is not None and done.state is JobState.COMPLETED
    workers = {w.info["queue"]: w.info for q in three.queues for w in q.workers()}
    assert workers[three.names[0]]["tasks"] == ["in_high"]
    assert workers[three.names[2]]["tasks"] == ["in_low"]
    assert workers[three.names[2]]["queues"] == three.names


def test_a_worker_refuses_what_it_cannot_serve(redis_url: str, queue_name: str) -> None:
    a, b = Tasks(f"{queue_name}-a"), Tasks(f"{queue_name}-b")
    with pytest.raises(ConfigurationError, match="named twice"):
        Worker([a, Tasks(a.queue_name)], url=redis_url)
    with pytest.raises(ConfigurationError, match="weight"):
        Worker([a, b], url=redis_url, settings=WorkerSettings(weights=(2,)))
    with pytest.raises(ConfigurationError, match="weights must be whole numbers"):
        WorkerSettings(weights=(2, 0))
    with pytest.raises(ConfigurationError, match="different Redis URLs"):
        Worker([Tasks("x", url="redis://127.0.0.1:1/0"), Tasks("y", url="redis://127.0.0.1:2/0")])
    # a Cluster: one BZPOPMIN's keys must share a slot (parsing only: nothing connects)
    cluster = "redis+cluster://127.0.0.1:7000"
    with pytest.raises(ConfigurationError, match="different slots of the Redis Cluster"):
        Worker([Tasks("high"), Tasks("low")], url=cluster)
    Worker([Tasks("high")], url=cluster)  # one queue: as before


def _cli(*args: str) -> Any:
    return CliRunner().invoke(main, ["worker", "support.multi_app:high", *args])


def test_cli_queues_option_errors_are_clear(redis_url: str) -> None:
    bad = _cli("--url", redis_url, "--queues", "multi-high:5,multi-low")
    assert bad.exit_code == 2 and "give every queue a weight" in bad.output
    bad = _cli("--url", redis_url, "--queues", "multi-high:x")
    assert bad.exit_code == 2 and "whole number >= 1" in bad.output
    bad = _cli("--url", redis_url, "--queues", "multi-high,nowhere")
    assert bad.exit_code == 2 and "no Tasks for queue(s) ['nowhere']" in bad.output
    assert "`nowhere_tasks = Tasks('nowhere')`" in bad.output  # a name the module lacks
    bad = _cli("--url", redis_url, "--queues", "multi-high,low")
    assert "`low_tasks = Tasks('low')`" in bad.output  # not `low`, the module's own variable


def test_cli_says_when_the_targets_queue_is_not_served(redis_url: str, queue_name: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "conveyor.integrations.cli", "worker", "multi_app:high",
         "--url", redis_url, "--burst", "--queues", f"{queue_name}-default,{queue_name}-low"],
        env={"PYTHONPATH": f"{APPS}:{SRC}", "TEST_QUEUE": queue_name, "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (
        f"warning: multi_app:high is the Tasks of queue '{queue_name}-high', which --queues "
        f"does not name: this worker does not serve '{queue_name}-high'"
    ) in proc.stderr
    assert f"queue '{queue_name}-high'" not in proc.stdout


def test_cli_worker_serves_several_queues_in_order(
    redis_url: str, queue_name: str, tmp_path: Path
) -> None:
    names = [f"{queue_name}-{q}" for q in ("high", "default", "low")]
    for name, task in zip(reversed(names), ("bulk", "normal", "urgent"), strict=True):
        with Queue(name, url=redis_url) as queue:
            queue.enqueue_many([(task, i) for i in range(5)])
    mark = tmp_path / "runs"
    proc = subprocess.run(
        [sys.executable, "-m", "conveyor.integrations.cli", "worker", "multi_app:high",
         "--url", redis_url, "--burst", "--concurrency", "1", "--queues", ",".join(names)],
        env={"PYTHONPATH": f"{APPS}:{SRC}", "TEST_QUEUE": queue_name, "TEST_MARK": str(mark),
             "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "15 completed, 0 failed" in proc.stdout
    assert f"queue '{names[2]}', tasks ['bulk']" in proc.stdout
    runs = [line.split()[0] for line in mark.read_text().splitlines()]
    assert runs == ["high"] * 5 + ["default"] * 5 + ["low"] * 5


def test_cli_worker_with_weights(redis_url: str, queue_name: str, tmp_path: Path) -> None:
    names = [f"{queue_name}-{q}" for q in ("high", "low")]
    for name, task in zip(names, ("urgent", "bulk"), strict=True):
        with Queue(name, url=redis_url) as queue:
            queue.enqueue_many([(task, i) for i in range(40)])
    mark = tmp_path / "runs"
    proc = subprocess.run(
        [sys.executable, "-m", "conveyor.integrations.cli", "worker", "multi_app:high",
         "--url", redis_url, "--burst", "--concurrency", "1",
         "--queues", f"{names[0]}:3,{names[1]}:1"],
        env={"PYTHONPATH": f"{APPS}:{SRC}", "TEST_QUEUE": queue_name, "TEST_MARK": str(mark),
             "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "(weight 3)" in proc.stdout and "80 completed, 0 failed" in proc.stdout
    first = Counter(line.split()[0] for line in mark.read_text().splitlines()[:40])
    assert first == {"high": 30, "low": 10}  # one job per claim: exactly 3:1


def _same_slot_names(base: str) -> list[str]:
    """Two queue names whose hash tags share a Cluster slot."""
    seen: dict[int, str] = {}
    for i in range(100_000):
        name = f"{base}-{i}"
        slot = key_slot(QueueKeys("conveyor", name).base.encode())
        if slot in seen:
            return [seen[slot], name]
        seen[slot] = name
    raise AssertionError("no two names in one slot")


def test_on_a_cluster_queues_sharing_a_slot_are_served_with_one_wait(
    server_factory: ServerFactory, queue_name: str
) -> None:
    nodes = start_cluster(server_factory, masters=1)
    url = cluster_url(nodes)
    names = _same_slot_names(queue_name)
    tasks = [Tasks(name, url=url) for name in names]
    ran: list[str] = []
    for each in tasks:
        each.task(name="note")(_appender(ran, each.queue_name))
    runner = WorkerRunner(url)
    queues = [Queue(name, url=url) for name in names]
    try:
        runner.start(tasks, concurrency=2)  # idle: blocked on both markers at once
        wait_until(lambda: all(q.workers() for q in queues), timeout=20)
        for queue in reversed(queues):
            queue.enqueue("note", 1)
            wait_until(lambda n=queue.name: n in ran, timeout=10)  # woken: idle_wait is 30 s
    finally:
        runner.stop_all()
        for queue in queues:
            queue.close()


def _appender(ran: list[str], name: str) -> Any:
    async def note(data: int) -> None:
        ran.append(name)

    return note

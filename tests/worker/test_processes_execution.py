"""Process execution against a real Redis and real child processes: data in,
result or error out, progress and current_job() in the child, children
reused and recycled, a dead child failing only its own job, and a timeout
that terminates the child and replaces it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conveyor import JobState, Queue
from conveyor.client.tasks import Tasks
from conveyor.errors import JobFailedError
from support import process_app
from support.workers import APPS, SRC, RunningWorker, WorkerRunner, wait_until


@pytest.fixture
def tasks(redis_url: str, queue_name: str) -> Tasks:
    tasks = Tasks(queue_name, url=redis_url)
    tasks.handlers.update(process_app.tasks.handlers)
    return tasks


def _pids(worker: RunningWorker) -> list[int]:
    jobs = worker.worker._jobs
    if jobs is None or jobs.processes is None:  # not started yet
        return []
    return jobs.processes.pids


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_jobs_run_in_reused_children_with_their_context_and_progress(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    worker = worker_runner.start(tasks, concurrency=4, processes=2)
    jobs = [sync_queue.enqueue("whoami", {"n": n}) for n in range(8)]
    results = [sync_queue.wait_result(j.id, timeout=30) for j in jobs]
    pids = {r["pid"] for r in results}
    assert os.getpid() not in pids and pids <= set(_pids(worker)) and len(pids) <= 2
    assert [r["data"] for r in results] == [{"n": n} for n in range(8)]
    assert [(r["id"], r["attempt"]) for r in results] == [(j.id, 1) for j in jobs]
    record = sync_queue.get(jobs[0].id)
    assert record is not None and record.progress == 0.5
    async_pid = sync_queue.wait_result(sync_queue.enqueue("async_whoami", None).id, timeout=30)
    assert async_pid in _pids(worker)


def test_errors_cross_the_pipe_with_their_kind(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    worker_runner.start(tasks, processes=1)
    permanent = sync_queue.enqueue("raises", "permanent")
    with pytest.raises(JobFailedError) as failure:
        sync_queue.wait_result(permanent.id, timeout=30)
    assert "PermanentError: no use trying again" in failure.value.error
    record = sync_queue.get(permanent.id)
    assert record is not None and record.failures == 1  # permanent: not retried


@pytest.mark.parametrize("how", ["kill", "exit", "segfault"])
def test_a_dead_child_fails_only_its_job_which_is_retried_and_the_child_replaced(
    how: str, tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    worker = worker_runner.start(tasks, concurrency=4, processes=2)
    wait_until(lambda: len(_pids(worker)) == 2, timeout=30)
    before = set(_pids(worker))
    others = [sync_queue.enqueue("cpu", 200_000) for _ in range(6)]
    victim = sync_queue.enqueue("dies_once", how)
    assert sync_queue.wait_result(victim.id, timeout=30) in _pids(worker)
    for job in others:
        assert sync_queue.wait_result(job.id, timeout=30)["sum"] > 0
        record = sync_queue.get(job.id)
        assert record is not None and (record.failures, record.attempts) == (0, 1)
    record = sync_queue.get(victim.id)
    assert record is not None and (record.state, record.failures) == (JobState.COMPLETED, 1)
    assert "ProcessDiedError: the child process running the job died" in (record.error or "")
    wait_until(lambda: len(_pids(worker)) == 2, timeout=30)
    assert set(_pids(worker)) != before  # the dead one was replaced


def test_a_timeout_terminates_the_child_and_replaces_it(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    worker = worker_runner.start(tasks, processes=1)
    wait_until(lambda: len(_pids(worker)) == 1, timeout=30)
    [old] = _pids(worker)
    stuck = sync_queue.enqueue("sleeps", 60, timeout=0.5)
    with pytest.raises(JobFailedError) as failure:
        sync_queue.wait_result(stuck.id, timeout=30)
    assert "JobTimeoutError: timed out after 0.5 s" in failure.value.error
    assert not _alive(old)
    after = sync_queue.wait_result(sync_queue.enqueue("sleeps", 0).id, timeout=30)
    assert after != old


def test_children_are_recycled_after_max_tasks_and_after_crossing_max_memory(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    worker_runner.start(
        tasks, concurrency=1, processes=1, max_tasks_per_child=2, max_memory_per_child=200 << 20
    )
    pids = [
        sync_queue.wait_result(sync_queue.enqueue("cpu", 10).id, timeout=30)["pid"]
        for _ in range(4)
    ]
    assert pids[0] == pids[1] != pids[2] == pids[3]
    eater = sync_queue.wait_result(sync_queue.enqueue("eats", 300).id, timeout=30)
    after = sync_queue.wait_result(sync_queue.enqueue("cpu", 10).id, timeout=30)["pid"]
    assert eater != after


def test_a_worker_can_run_every_sync_handler_in_processes(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    worker = worker_runner.start(tasks, processes=1, executor="process")
    pid = sync_queue.wait_result(sync_queue.enqueue("plain", None).id, timeout=30)
    assert pid != os.getpid() and pid in _pids(worker)


def test_without_process_executor_plain_sync_handlers_stay_in_threads(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    worker_runner.start(tasks, processes=1)
    assert sync_queue.wait_result(sync_queue.enqueue("plain", None).id, timeout=30) == os.getpid()


def test_the_cli_worker_runs_sync_handlers_in_children(
    redis_url: str, queue_name: str, sync_queue: Queue
) -> None:
    jobs = [sync_queue.enqueue("sleepy", {"seconds": 0}) for _ in range(5)]
    command = [sys.executable, "-m", "conveyor.integrations.cli", "worker", "kill_app:tasks",
               "--url", redis_url, "--burst", "--executor", "process", "--processes", "1",
               "--max-tasks-per-child", "3"]  # fmt: skip
    env = {"PYTHONPATH": f"{APPS}:{SRC}", "TEST_QUEUE": queue_name, "PATH": "/usr/bin:/bin"}
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) as proc:
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "5 completed, 0 failed" in out
    pids = [sync_queue.wait_result(j.id, timeout=5)["pid"] for j in jobs]
    assert proc.pid not in pids
    assert pids[0] == pids[1] == pids[2] != pids[3] == pids[4], pids  # recycled after 3


def test_the_timeout_counts_from_when_a_child_takes_the_job(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    worker = worker_runner.start(tasks, concurrency=2, processes=1)
    wait_until(lambda: len(_pids(worker)) == 1, timeout=30)
    first = sync_queue.enqueue("sleeps", 1.5, timeout=10)
    behind = sync_queue.enqueue("sleeps", 0.1, timeout=0.8)  # waits ~1.5 s for the child
    assert sync_queue.wait_result(behind.id, timeout=30) in _pids(worker)
    assert sync_queue.wait_result(first.id, timeout=30) in _pids(worker)


def test_the_timeout_counts_from_when_the_child_begins_after_importing_the_handler(
    redis_url: str, queue_name: str, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    """A fresh child imports the handler's module (0.4 s here) before it
    begins the first job: 0.3 s of run under a 0.5 s timeout is in time,
    though 0.7 s pass from the job's hand-off to its end."""
    from support import slow_import_app

    tasks = Tasks(queue_name, url=redis_url)
    tasks.handlers.update(slow_import_app.tasks.handlers)
    worker = worker_runner.start(tasks, concurrency=1, processes=1)
    wait_until(lambda: len(_pids(worker)) == 1, timeout=30)
    job = sync_queue.enqueue("naps", 0.3, timeout=0.5)
    assert sync_queue.wait_result(job.id, timeout=30) in _pids(worker)
    stuck = sync_queue.enqueue("naps", 5, timeout=0.5)  # the timeout still stops a run
    with pytest.raises(JobFailedError) as failure:
        sync_queue.wait_result(stuck.id, timeout=30)
    assert failure.value.error.startswith("JobTimeoutError")


def test_a_child_writes_the_jobs_log_and_checkpoint_through_the_parent(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    worker_runner.start(tasks, processes=1)
    job = sync_queue.enqueue("reports", None)
    assert sync_queue.wait_result(job.id, timeout=30) == {"step": 1}
    assert sync_queue.job_log(job.id)[-4:] == [
        "attempt 1", "in a child", "attempt 2", "in a child"
    ]  # fmt: skip


def test_a_job_sent_ahead_to_a_busy_child_is_taken_back_when_aborted(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner, tmp_path: Path
) -> None:
    worker = worker_runner.start(tasks, concurrency=2, processes=1, lease=3)  # beats each 1 s
    wait_until(lambda: len(_pids(worker)) == 1, timeout=30)
    [child] = _pids(worker)
    busy = sync_queue.enqueue("sleeps", 6)
    mark = tmp_path / "ran"
    behind = sync_queue.enqueue("touches", str(mark))  # sent to the child, waits in its pipe
    wait_until(lambda: (r := sync_queue.get(behind.id)) is not None and r.state == "active", 30)
    assert sync_queue.abort(behind.id) == "aborting"
    with pytest.raises(JobFailedError) as failure:
        sync_queue.wait_result(behind.id, timeout=30)
    assert failure.value.error.startswith("AbortedError")
    assert sync_queue.get(busy.id).state == JobState.ACTIVE  # type: ignore[union-attr]
    assert sync_queue.wait_result(busy.id, timeout=30) == child  # not killed for it
    assert sync_queue.wait_result(sync_queue.enqueue("sleeps", 0).id, timeout=30) == child
    assert not mark.exists()  # it never ran


def test_a_job_waiting_behind_a_long_one_moves_to_a_child_that_falls_idle(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    worker = worker_runner.start(tasks, concurrency=4, processes=2)
    wait_until(lambda: len(_pids(worker)) == 2, timeout=30)
    long = sync_queue.enqueue("sleeps", 5)
    short = [sync_queue.enqueue("sleeps", 0) for _ in range(3)]
    for job in short:  # one of them was sent behind the long job, then taken back
        assert sync_queue.wait_result(job.id, timeout=30) in _pids(worker)
    assert sync_queue.get(long.id).state == JobState.ACTIVE  # type: ignore[union-attr]
    assert sync_queue.wait_result(long.id, timeout=30) in _pids(worker)

"""Real worker processes: SIGKILL mid-job, SIGSTOP past the lease, SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import JobState, Queue
from support.workers import spawn_worker, wait_until


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def _mark_lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_sigkill_mid_job_another_worker_finishes_it(
    redis_url: str,
    queue_name: str,
    sync_queue: Queue,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    mark = tmp_path / "started"
    env = {"TEST_QUEUE": queue_name, "TEST_MARK": str(mark)}
    done = sync_queue.enqueue("sleepy", {"seconds": 1.0})
    first = spawn_worker("kill_app:tasks", redis_url, "--lease", "1", env=env)
    processes.append(first)
    wait_until(lambda: _mark_lines(mark), timeout=20)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(5)
    second = spawn_worker("kill_app:tasks", redis_url, "--lease", "1", env=env)
    processes.append(second)
    result = sync_queue.wait_result(done.id, timeout=30)
    assert result == {"pid": second.pid}
    job = sync_queue.get(done.id)
    assert (job.state, job.attempts, job.stalls) == (JobState.COMPLETED, 2, 1)
    assert _mark_lines(mark) == [str(first.pid), str(second.pid)]


def test_sigstop_past_the_lease_the_late_completion_is_rejected(
    redis_url: str,
    queue_name: str,
    sync_queue: Queue,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    mark = tmp_path / "started"
    env = {"TEST_QUEUE": queue_name, "TEST_MARK": str(mark)}
    done = sync_queue.enqueue("sleepy", {"seconds": 1.5})
    frozen = spawn_worker("kill_app:tasks", redis_url, "--lease", "1", env=env)
    processes.append(frozen)
    wait_until(lambda: _mark_lines(mark), timeout=20)
    os.killpg(frozen.pid, signal.SIGSTOP)
    other = spawn_worker("kill_app:tasks", redis_url, "--lease", "1", env=env)
    processes.append(other)
    assert sync_queue.wait_result(done.id, timeout=30) == {"pid": other.pid}
    os.killpg(frozen.pid, signal.SIGCONT)
    time.sleep(2.5)  # the thawed worker finishes its sleep and tries to complete
    job = sync_queue.get(done.id)
    assert job.result == {"pid": other.pid}  # the stale completion did not overwrite it
    assert (job.attempts, job.stalls) == (2, 1)
    completions = [e for e in sync_queue.events(after="0-0") if e.name == "completed"]
    assert len(completions) == 1
    os.killpg(frozen.pid, signal.SIGTERM)
    output = frozen.communicate(timeout=15)[0].decode()
    assert "lease lost" in output


def test_sigterm_lets_the_running_job_finish(
    redis_url: str,
    queue_name: str,
    sync_queue: Queue,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    mark = tmp_path / "started"
    env = {"TEST_QUEUE": queue_name, "TEST_MARK": str(mark)}
    done = sync_queue.enqueue("sleepy", {"seconds": 0.5})
    worker = spawn_worker("kill_app:tasks", redis_url, "--grace", "5", env=env)
    processes.append(worker)
    wait_until(lambda: _mark_lines(mark), timeout=20)
    os.killpg(worker.pid, signal.SIGTERM)
    assert worker.wait(10) == 0
    assert sync_queue.get(done.id).state is JobState.COMPLETED
    assert sync_queue.workers() == []

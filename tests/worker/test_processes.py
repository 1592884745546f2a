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


class Workers:
    """Worker processes of kill_app for the test's queue; each marks the
    file `mark` with its pid when it starts a job. All killed at teardown."""

    def __init__(self, url: str, queue_name: str, mark: Path) -> None:
        self.url = url
        self.mark = mark
        self.env = {"TEST_QUEUE": queue_name, "TEST_MARK": str(mark)}
        self.started: list[subprocess.Popen[bytes]] = []

    def spawn(self, *args: str) -> subprocess.Popen[bytes]:
        proc = spawn_worker("kill_app:tasks", self.url, *args, env=self.env)
        self.started.append(proc)
        return proc

    def spawn_into_a_job(self, *args: str) -> subprocess.Popen[bytes]:
        """Spawn one, and wait until it has started a job."""
        proc = self.spawn(*args)
        wait_until(lambda: str(proc.pid) in self.marks(), timeout=20)
        return proc

    def marks(self) -> list[str]:
        return self.mark.read_text().split() if self.mark.exists() else []

    def kill_all(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
            if proc.stdout is not None:
                proc.stdout.close()


def _worker_id(queue: Queue, pid: int) -> str | None:
    return next((w.id for w in queue.workers() if w.info.get("pid") == pid), None)


@pytest.fixture
def workers(redis_url: str, queue_name: str, tmp_path: Path) -> Iterator[Workers]:
    spawned = Workers(redis_url, queue_name, tmp_path / "started")
    try:
        yield spawned
    finally:
        spawned.kill_all()


def test_sigkill_mid_job_another_worker_finishes_it(sync_queue: Queue, workers: Workers) -> None:
    done = sync_queue.enqueue("sleepy", {"seconds": 1.0})
    first = workers.spawn_into_a_job("--lease", "1")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(5)
    second = workers.spawn("--lease", "1")
    result = sync_queue.wait_result(done.id, timeout=30)
    # a suspect (its worker died with it) runs in a child process of its own
    assert result["pid"] not in (first.pid, second.pid)
    job = sync_queue.get(done.id)
    assert (job.state, job.attempts, job.stalls) == (JobState.COMPLETED, 2, 1)
    assert job.worker == _worker_id(sync_queue, second.pid)
    assert workers.marks() == [str(first.pid), str(result["pid"])]


def test_sigstop_past_the_lease_the_late_completion_is_rejected(
    sync_queue: Queue, workers: Workers
) -> None:
    done = sync_queue.enqueue("sleepy", {"seconds": 1.5})
    frozen = workers.spawn_into_a_job("--lease", "1")
    os.killpg(frozen.pid, signal.SIGSTOP)
    other = workers.spawn("--lease", "1")
    rerun = sync_queue.wait_result(done.id, timeout=30)  # a suspect: in a child of `other`
    assert rerun["pid"] not in (frozen.pid, other.pid)
    assert sync_queue.get(done.id).worker == _worker_id(sync_queue, other.pid)
    os.killpg(frozen.pid, signal.SIGCONT)
    time.sleep(2.5)  # the thawed worker finishes its sleep and tries to complete
    job = sync_queue.get(done.id)
    assert job.result == rerun  # the stale completion did not overwrite it
    # each run before the last stalled: the frozen worker's own, and at times a second one, a
    # claim it had pipelined behind its blocking wait before the stop (run by Redis when the
    # reap woke it) that took the suspect back for the stopped process
    assert job.attempts >= 2 and job.stalls == job.attempts - 1, job.errors
    completions = [e for e in sync_queue.events(after="0-0") if e.name == "completed"]
    assert len(completions) == 1
    os.killpg(frozen.pid, signal.SIGTERM)
    output = frozen.communicate(timeout=15)[0].decode()
    assert "lease lost" in output


def test_sigterm_lets_the_running_job_finish(sync_queue: Queue, workers: Workers) -> None:
    done = sync_queue.enqueue("sleepy", {"seconds": 0.5})
    worker = workers.spawn_into_a_job("--grace", "5")
    os.killpg(worker.pid, signal.SIGTERM)
    assert worker.wait(10) == 0
    assert sync_queue.get(done.id).state is JobState.COMPLETED
    assert sync_queue.workers() == []

"""Hooks: each point of a job's life, in producers and in a real worker."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from conveyor import AsyncQueue, JobRequest, PermanentError, Queue
from conveyor.client.models import QueueSettings
from conveyor.client.tasks import Tasks
from conveyor.errors import ConfigurationError, JobFailedError, ValidationError
from conveyor.hooks import Hook, RunningJob
from conveyor.worker import Worker, WorkerSettings, current_job
from conveyor.worker.context import current_job_or_none
from support.clients import AsyncFacade
from support.workers import RunningWorker, WorkerRunner, wait_until


class Recorder(Hook):
    """Writes down every call it gets."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.lock = threading.Lock()

    def _add(self, *entry: Any) -> None:
        with self.lock:
            self.calls.append(entry)

    def named(self, name: str) -> list[tuple[Any, ...]]:
        with self.lock:
            return [c for c in self.calls if c[0] == name]

    def before_enqueue(self, queue: str, task: str, data: Any, options: dict[str, Any]) -> None:
        self._add("before_enqueue", task, data)
        if task == "renamed":
            options["id"] = f"hooked-{data}"

    def after_enqueue(
        self,
        queue: str,
        task: str,
        options: dict[str, Any],
        *,
        job_id: str | None,
        error: BaseException | None,
    ) -> None:
        self._add("after_enqueue", task, job_id, type(error).__name__ if error else None)

    def worker_start(self, worker_id: str, queue: str) -> None:
        self._add("worker_start", queue)

    def worker_stop(self, worker_id: str, queue: str) -> None:
        self._add("worker_stop", queue)

    def before_run(self, job: RunningJob) -> None:
        self._add("before_run", job.task, job.attempt, job.waited)

    def after_success(self, job: RunningJob, *, duration: float) -> None:
        self._add("after_success", job.task, duration)

    def after_failure(
        self, job: RunningJob, exc: BaseException | None, *, error: str, duration: float
    ) -> None:
        self._add("after_failure", job.task, job.attempt, type(exc).__name__, error.split(":")[0])

    def on_completed(self, job: RunningJob) -> None:
        self._add("on_completed", job.task)

    def on_retry(self, job: RunningJob, *, error: str) -> None:
        self._add("on_retry", job.task, job.attempt)

    def on_final_failure(self, job: RunningJob, *, error: str) -> None:
        self._add("on_final_failure", job.task, job.attempt, error.split(":")[0])


class Broken(Hook):
    def before_run(self, job: RunningJob) -> None:
        raise RuntimeError("a broken hook")

    def on_completed(self, job: RunningJob) -> None:
        raise RuntimeError("a broken hook")


def test_every_hook_is_called_at_its_point(
    redis_url: str, queue_name: str, worker_runner: WorkerRunner
) -> None:
    hook = Recorder()
    tasks = Tasks(queue_name, url=redis_url, settings=QueueSettings(hooks=(hook,)))

    @tasks.task
    async def ok(data: int) -> int:
        return data

    @tasks.task(max_failures=2, min_backoff=0.01, max_backoff=0.01)
    def flaky(data: None) -> None:
        raise ValueError("boom")

    @tasks.task
    async def doomed(data: None) -> None:
        raise PermanentError("no")

    first = ok.enqueue(1)
    second = flaky.enqueue(None)
    third = doomed.enqueue(None)
    handle = worker_runner.start(tasks)
    queue = tasks.queue()
    assert queue.wait_result(first.id, timeout=20) == 1
    for job_id in (second.id, third.id):
        with pytest.raises(JobFailedError):
            queue.wait_result(job_id, timeout=20)
    wait_until(lambda: len(hook.named("on_final_failure")) == 2, timeout=20)
    handle.stop()

    assert [c[1:] for c in hook.named("before_enqueue")] == [
        ("ok", 1), ("flaky", None), ("doomed", None)
    ]  # fmt: skip
    assert hook.named("worker_start") == [("worker_start", queue_name)]
    assert hook.named("worker_stop") == [("worker_stop", queue_name)]
    runs = hook.named("before_run")
    assert sorted((c[1], c[2]) for c in runs) == [
        ("doomed", 1), ("flaky", 1), ("flaky", 2), ("ok", 1)
    ]  # fmt: skip
    # first attempts know how long they waited since their enqueue; retries do not
    assert all((c[3] is not None and c[3] >= 0) == (c[2] == 1) for c in runs)
    ((_, task, duration),) = hook.named("after_success")
    assert task == "ok" and 0 <= duration < 10
    assert hook.named("on_completed") == [("on_completed", "ok")]
    assert sorted(hook.named("after_failure")) == [
        ("after_failure", "doomed", 1, "PermanentError", "PermanentError"),
        ("after_failure", "flaky", 1, "ValueError", "ValueError"),
        ("after_failure", "flaky", 2, "ValueError", "ValueError"),
    ]
    assert hook.named("on_retry") == [("on_retry", "flaky", 1)]
    assert sorted(hook.named("on_final_failure")) == [
        ("on_final_failure", "doomed", 1, "PermanentError"),
        ("on_final_failure", "flaky", 2, "ValueError"),
    ]


@pytest.mark.parametrize("client", ["sync", "async"])
def test_before_enqueue_may_change_the_options_and_after_enqueue_tells_the_end(
    redis_url: str, queue_name: str, client: str
) -> None:
    hook = Recorder()
    settings = QueueSettings(hooks=(hook,))
    if client == "sync":
        queue: Any = Queue(queue_name, url=redis_url, settings=settings)
    else:
        queue = AsyncFacade(lambda: AsyncQueue(queue_name, url=redis_url, settings=settings))
    with queue:
        assert queue.enqueue("renamed", 7).id == "hooked-7"
        done = queue.enqueue_many([("renamed", 8), ("other", 9)])
        assert done[0].id == "hooked-8" and done[1].id != "hooked-9"
        assert queue.get("hooked-8") is not None
        with pytest.raises(ValidationError):
            queue.enqueue("other", 10, priority=-5)
    assert [c[1:] for c in hook.named("before_enqueue")] == [
        ("renamed", 7), ("renamed", 8), ("other", 9), ("other", 10)
    ]  # fmt: skip
    assert [c[1:] for c in hook.named("after_enqueue")] == [
        ("renamed", "hooked-7", None), ("renamed", "hooked-8", None), ("other", done[1].id, None),
        ("other", None, "ValidationError"),
    ]  # fmt: skip


def test_a_failing_hook_is_logged_and_the_job_still_completes(
    redis_url: str, queue_name: str, worker_runner: WorkerRunner, caplog: pytest.LogCaptureFixture
) -> None:
    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task
    async def ok(data: int) -> int:
        return data * 2

    job = ok.enqueue(21)
    handle = RunningWorker(Worker(tasks, url=redis_url, hooks=[Broken()]))
    worker_runner.running.append(handle)  # stopped at the end if the test fails
    assert tasks.queue().wait_result(job.id, timeout=20) == 42
    handle.stop()
    assert "hook Broken.before_run failed; ignored" in caplog.text


def test_a_hook_must_be_a_hook(redis_url: str, queue_name: str) -> None:
    tasks = Tasks(queue_name, url=redis_url)
    with pytest.raises(ConfigurationError, match="must be a conveyor.hooks.Hook"):
        Worker(tasks, hooks=[object()])  # type: ignore[list-item]


def test_headers_travel_with_the_job_to_its_run(
    redis_url: str, queue_name: str, worker_runner: WorkerRunner
) -> None:
    seen: dict[str, Any] = {}

    class Headers(Hook):
        def before_run(self, job: RunningJob) -> None:
            seen[str(job.data)] = job.headers

    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task
    async def echo(data: int) -> int:
        return data

    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with_headers = echo.enqueue(1, headers={"traceparent": traceparent, "x.y-z": ""})
    without = echo.enqueue(2)
    handle = RunningWorker(Worker(tasks, url=redis_url, hooks=[Headers()]))
    worker_runner.running.append(handle)
    queue = tasks.queue()
    assert queue.wait_result(with_headers.id, timeout=20) == 1
    assert queue.wait_result(without.id, timeout=20) == 2
    handle.stop()
    assert seen == {"1": {"traceparent": traceparent, "x.y-z": ""}, "2": None}


@pytest.mark.parametrize(
    "headers",
    [["a"], {"": "x"}, {"a b": "x"}, {"a": "line\nbreak"}, {"a": 1}, {"a": "é"},
     {"a": "x" * 1025}, {f"h{i}": "x" * 1000 for i in range(5)}],
)  # fmt: skip
def test_bad_headers_are_refused(redis_url: str, queue_name: str, headers: Any) -> None:
    with Queue(queue_name, url=redis_url) as queue:
        with pytest.raises(ValidationError):
            queue.enqueue("t", None, headers=headers)
        assert sum(queue.counts().values()) == 0  # nothing was written


def test_a_lost_lease_is_told_and_the_stopped_run_too(
    redis_url: str, queue_name: str, worker_runner: WorkerRunner, redis_client: Any
) -> None:
    hook = Recorder()
    stopped: list[tuple[str, float]] = []

    class Stops(Hook):
        def on_lease_lost(self, job: RunningJob) -> None:
            hook._add("on_lease_lost", job.task)

        def after_stopped(self, job: RunningJob, *, duration: float) -> None:
            stopped.append((job.task, duration))

    tasks = Tasks(queue_name, url=redis_url)
    started = threading.Event()

    @tasks.task
    async def forever(data: None) -> None:
        started.set()
        await asyncio.sleep(60)  # stopped when the lease goes

    job = forever.enqueue(None)
    handle = RunningWorker(Worker(tasks, url=redis_url, hooks=[Stops()],
                                  settings=WorkerSettings(lease=1.5, idle_wait=30)))  # fmt: skip
    worker_runner.running.append(handle)
    assert started.wait(20)
    # another claim took the job over: its token is no longer this worker's
    redis_client.hset(tasks.queue().core.keys.job(job.id), "token", "someone-else")
    wait_until(lambda: stopped, timeout=20)
    handle.stop()
    assert hook.named("on_lease_lost") == [("on_lease_lost", "forever")]
    assert stopped[0][0] == "forever" and 0 < stopped[0][1] < 30


class CurrentJobSeen(Hook):
    """What current_job_or_none() gives in the hooks of a run."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def before_run(self, job: RunningJob) -> None:
        self.seen.append(current_job_or_none())

    def after_success(self, job: RunningJob, *, duration: float) -> None:
        self.seen.append(current_job_or_none())


def test_hooks_of_a_run_see_no_current_job_between_quick_runs(
    redis_url: str, queue_name: str, worker_runner: WorkerRunner
) -> None:
    # a runner may leave a quick run's job current until the next is set only when no hook
    # of a run but the metrics recorder's could see it (pool.JobPool._quiet_runs)
    hook = CurrentJobSeen()
    tasks = Tasks(queue_name, url=redis_url, settings=QueueSettings(hooks=(hook,)))
    ran: list[tuple[int, int]] = []

    @tasks.task
    async def quick(data: int) -> None:
        ran.append((data, current_job().data))

    tasks.queue().enqueue_many([JobRequest("quick", n) for n in range(50)])
    handle = worker_runner.start(tasks)
    wait_until(lambda: len(hook.seen) == 100, timeout=20)
    handle.stop()
    assert sorted(ran) == [(n, n) for n in range(50)]
    assert hook.seen == [None] * 100


async def test_a_runner_leaves_a_quick_run_s_job_current_only_with_quiet_hooks(
    redis_url: str, queue_name: str
) -> None:
    from conveyor.hooks import Hooks
    from conveyor.worker.metrics import MetricsRecorder
    from conveyor.worker.pool import JobPool

    async with AsyncQueue(queue_name, url=redis_url) as queue:
        recorder = MetricsRecorder(queue.core)
        for hooks, quiet in ((None, True), (Hooks((recorder,)), True),
                             (Hooks((recorder, CurrentJobSeen())), False),
                             (Hooks((Recorder(),)), False)):  # fmt: skip
            pool = JobPool(
                queue, worker_id="w", handlers={}, concurrency=1, lease=30.0,
                freed=asyncio.Event(), hooks=hooks,
            )  # fmt: skip
            assert pool._quiet_runs is quiet
            await pool.close()

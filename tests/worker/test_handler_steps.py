"""Async handlers are started by hand: one that finishes without suspending
runs with no timer armed; one that suspends gets its deadline (from its
start), can still be cancelled, and first hands the jobs behind it on to
another runner."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from conveyor import JobState, Queue
from conveyor.client.tasks import Task, Tasks
from conveyor.worker import JobContext, current_job
from conveyor.worker.execution import Failure, Running, Success, execute
from conveyor.worker.pool import Inbox
from support.workers import WorkerRunner

# --- execute(), without Redis --------------------------------------------------------------


def _running(fn: Any, timeout: float | None = None, *, job_id: str = "j1") -> Running:
    tasks = Tasks("unit")
    ctx = JobContext(
        id=job_id,
        queue="unit",
        task="t",
        data={"n": 1},
        attempt=1,
        token="tok",
        worker_id="w",
        report_progress=lambda ctx, fraction: None,
    )
    return Running(ctx, timeout, Task("t", fn, tasks), None)


def _execute(running: Running) -> tuple[Any, int]:
    """The outcome, and how often execute() said the handler suspended."""
    suspended = []

    async def main() -> Any:
        return await execute(running, ThreadPoolExecutor(2), lambda: suspended.append(1))

    return asyncio.run(main()), len(suspended)


def test_a_handler_that_finishes_at_once_has_no_timer_and_sees_its_job() -> None:
    seen: list[Any] = []

    async def quick(data: Any) -> dict[str, Any]:
        seen.append((running.scope, current_job() is running.ctx, data))
        return {"ok": data["n"]}

    running = _running(quick, timeout=5)
    assert _execute(running) == (Success('{"ok":1}'), 0)
    assert seen == [(None, True, {"n": 1})]


def test_a_handler_that_suspends_runs_on_under_its_deadline() -> None:
    scopes: list[Any] = []

    async def slow(data: Any) -> str:
        scopes.append(running.scope)
        await asyncio.sleep(0)
        scopes.append(running.scope)
        assert current_job() is running.ctx
        # the deadline (execution.Deadline) is a timer of its own; the scope
        # is only the means to cancel
        timers = asyncio.get_running_loop()._scheduled  # type: ignore[attr-defined]
        scopes.append(sorted(round(t.when() - time.monotonic()) for t in timers))
        return "done"

    running = _running(slow, timeout=5)
    assert _execute(running) == (Success('"done"'), 1)
    assert scopes[0] is None and isinstance(scopes[1], asyncio.Timeout)
    assert scopes[2] == [5]


def test_a_handler_that_suspends_past_its_timeout_is_cancelled() -> None:
    seen: list[str] = []

    async def stuck(data: Any) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    outcome, suspended = _execute(_running(stuck, timeout=0.05))
    assert isinstance(outcome, Failure) and not outcome.permanent
    assert outcome.error.startswith("JobTimeoutError: timed out after 0.05 s")
    assert (seen, suspended) == (["cancelled"], 1)


def test_a_handler_entering_its_own_timeout_before_suspending_gets_it() -> None:
    async def own_timeout(data: Any) -> str:
        try:
            async with asyncio.timeout(0.05):  # entered in the hand-driven first step
                await asyncio.sleep(5)
        except TimeoutError:
            return "its own timeout"
        return "slept"

    assert _execute(_running(own_timeout, timeout=10)) == (Success('"its own timeout"'), 1)


def test_the_deadline_counts_from_the_start_not_from_the_first_suspension() -> None:
    async def busy_then_waits(data: Any) -> str:
        until = time.monotonic() + 0.3
        while time.monotonic() < until:  # busy before it first suspends
            pass
        await asyncio.sleep(0.3)
        return "late"

    outcome, _ = _execute(_running(busy_then_waits, timeout=0.4))
    assert isinstance(outcome, Failure) and "JobTimeoutError" in outcome.error


@pytest.mark.parametrize("suspends", [False, True])
def test_a_handler_that_raises_fails_before_or_after_suspending(suspends: bool) -> None:
    async def broken(data: Any) -> None:
        if suspends:
            await asyncio.sleep(0)
        raise ValueError("nope")

    outcome, suspended = _execute(_running(broken, timeout=5))
    assert isinstance(outcome, Failure) and not outcome.permanent
    assert outcome.error.startswith("ValueError: nope")
    assert suspended == int(suspends)


def test_an_async_handler_returning_another_awaitable_is_awaited() -> None:
    loop_futures: list[asyncio.Future[str]] = []

    def returns_future(data: Any) -> asyncio.Future[str]:
        future = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.01, future.set_result, "from a future")
        loop_futures.append(future)
        return future

    running = _running(returns_future, timeout=5)
    # declared async (as inspect.markcoroutinefunction does on 3.12) yet returning a plain awaitable
    assert running.handler is not None
    running.handler.__dict__["is_async"] = True
    assert _execute(running) == (Success('"from a future"'), 1)


# --- the inbox ----------------------------------------------------------------------------


def test_the_inbox_wakes_one_runner_per_batch_and_more_only_when_handed_on() -> None:
    async def main() -> list[list[str]]:
        inbox = Inbox()
        taken: list[str] = []
        hand_on = asyncio.Event()

        async def runner(name: str) -> None:
            running = await inbox.get()
            taken.append(f"{name}:{running.ctx.id}")
            await hand_on.wait()  # "suspends": hands the rest on first
            inbox.hand_on()
            await asyncio.sleep(3600)

        runners = [asyncio.create_task(runner(name)) for name in "abc"]
        await asyncio.sleep(0)  # all three idle
        for job_id in ("j1", "j2", "j3"):
            inbox.put(_running(None, job_id=job_id))
        for _ in range(5):
            await asyncio.sleep(0)
        seen = [list(taken)]
        hand_on.set()
        for _ in range(5):
            await asyncio.sleep(0)
        seen.append(list(taken))
        for task in runners:
            task.cancel()
        await asyncio.gather(*runners, return_exceptions=True)
        return seen

    first, then = asyncio.run(main())
    assert first == ["a:j1"]  # one wake-up for the batch, not one per job
    assert then == ["a:j1", "b:j2", "c:j3"]


def test_the_inbox_wakes_one_runner_and_a_cancelled_one_passes_the_wake_on() -> None:
    async def main() -> list[str]:
        inbox = Inbox()
        got: list[str] = []

        async def runner(name: str) -> None:
            running = await inbox.get()
            got.append(f"{name}:{running.ctx.id}")

        first, second = asyncio.create_task(runner("a")), asyncio.create_task(runner("b"))
        await asyncio.sleep(0)  # both idle
        inbox.put(_running(None))
        first.cancel()  # woken, and cancelled before it ran
        await asyncio.gather(first, return_exceptions=True)
        await asyncio.wait_for(second, 1)
        return got

    assert asyncio.run(main()) == ["b:j1"]


# --- a real worker -------------------------------------------------------------------------


@pytest.fixture
def tasks(redis_url: str, queue_name: str) -> Tasks:
    return Tasks(queue_name, url=redis_url)


@pytest.mark.parametrize("first", ["async", "sync"])
def test_a_job_that_suspends_does_not_hold_up_the_jobs_behind_it(
    first: str, tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    released = threading.Event()

    @tasks.task
    async def waits(data: None) -> bool:
        for _ in range(500):  # until the job behind it ran
            if released.is_set():
                return True
            await asyncio.sleep(0.01)
        return False

    @tasks.task
    def waits_in_a_thread(data: None) -> bool:
        return released.wait(5)

    @tasks.task
    async def releases(data: None) -> None:
        released.set()

    blocked = sync_queue.enqueue("waits" if first == "async" else "waits_in_a_thread", None)
    behind = sync_queue.enqueue("releases", None)
    worker_runner.start(tasks, concurrency=2)
    assert sync_queue.wait_result(behind.id, timeout=10) is None
    assert sync_queue.wait_result(blocked.id, timeout=10) is True


def test_an_async_handler_that_fails_after_suspending_is_retried(
    tasks: Tasks, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    @tasks.task(max_failures=3, min_backoff=0, max_backoff=0)
    async def flaky(data: None) -> int:
        await asyncio.sleep(0.01)
        if current_job().attempt == 1:
            raise RuntimeError("first try")
        return current_job().attempt

    done = flaky.enqueue(None)
    worker_runner.start(tasks)
    assert sync_queue.wait_result(done.id, timeout=10) == 2
    job = sync_queue.get(done.id)
    assert (job.state, job.failures) == (JobState.COMPLETED, 1)
    assert "RuntimeError: first try" in job.error


# --- JobPool.lose: a heartbeat that races an outcome's write ------------------------------


async def test_a_lost_lease_report_for_a_job_whose_outcome_waits_to_be_written_is_ignored(
    redis_url: str, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A heartbeat reads the held leases, the ack writer completes one of those jobs, then the
    # heartbeat's script finds it no longer active and reports it lost. That job is not lost:
    # its outcome is written, and the ack's own reply says whether it counted.
    from conveyor import AsyncQueue
    from conveyor.protocol.ops import ClaimedJob
    from conveyor.worker.pool import JobPool

    release = asyncio.Event()

    async def quick(data: Any) -> int:
        return 1

    async def slow(data: Any) -> int:
        await release.wait()
        return 2

    tasks = Tasks(queue_name)
    handlers = {"quick": Task("quick", quick, tasks), "slow": Task("slow", slow, tasks)}
    async with AsyncQueue(queue_name, url=redis_url) as queue:
        pool = JobPool(
            queue, worker_id="w", handlers=handlers, concurrency=2, lease=30.0,
            freed=asyncio.Event(),
        )  # fmt: skip
        runners = [asyncio.create_task(pool._run_jobs()) for _ in range(2)]  # no ack writer
        for job_id, task in (("done", "quick"), ("busy", "slow")):
            pool.accept(ClaimedJob(job_id, task, b"null", 1, *[None] * 9), "tok", 0)
        for _ in range(100):
            if pool.held["done"].ended:
                break
            await asyncio.sleep(0.01)
        with caplog.at_level("WARNING", logger="conveyor.worker"):
            pool.lose(["done", "busy"])
        assert not pool.held["done"].ctx.lost
        assert pool.held["busy"].ctx.lost  # still running: stopped
        assert [r.getMessage() for r in caplog.records] == [
            "job busy: lease lost (expired or taken over); stopping it"
        ]
        release.set()
        for runner in runners:
            runner.cancel()
        await asyncio.gather(*runners, return_exceptions=True)


async def test_an_accepted_job_s_context_has_each_field_in_its_place(
    redis_url: str, queue_name: str
) -> None:
    # JobPool.accept builds the JobContext by position: each field must land where it belongs.
    from dataclasses import fields

    from conveyor import AsyncQueue
    from conveyor.protocol.ops import ClaimedJob
    from conveyor.worker.pool import JobPool

    async def handler(data: Any) -> None:
        return None

    tasks = Tasks(queue_name)
    async with AsyncQueue(queue_name, url=redis_url) as queue:
        pool = JobPool(
            queue, worker_id="w-7", handlers={"t": Task("t", handler, tasks)}, concurrency=1,
            lease=30.0, freed=asyncio.Event(),
        )  # fmt: skip
        claimed = ClaimedJob(
            "j1", "t", b'{"a":1}', 3, *[None] * 9, None, '{"h":"v"}', b'{"next":2}', None
        )
        pool.accept(claimed, "tok", 0)
        ctx = pool.held["j1"].ctx
        expected = {
            "id": "j1", "queue": queue_name, "task": "t", "data": {"a": 1}, "attempt": 3,
            "token": "tok", "worker_id": "w-7", "lost": False, "cancelled": False,
            "waited": None, "headers": {"h": "v"}, "checkpoint": {"next": 2},
            "loop": asyncio.get_running_loop(),
        }  # fmt: skip
        assert {f.name: getattr(ctx, f.name) for f in fields(ctx) if f.name in expected} == (
            expected
        )
        assert ctx.flows is not None and type(ctx.flows).__name__ == "WorkerFlows"
        for name, method in (("report_progress", "progress"), ("report_log", "job_log"),
                             ("report_checkpoint", "checkpoint")):  # fmt: skip
            assert getattr(getattr(ctx, name), "__name__", None) == method
        assert {f.name for f in fields(ctx)} == {*expected, "flows", "report_progress",
                                                "report_log", "report_checkpoint"}  # fmt: skip
        assert pool.held["j1"].timeout is None and pool.held["j1"].problem is None

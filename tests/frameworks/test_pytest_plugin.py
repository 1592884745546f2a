"""The pytest plugin shipped with the package, run the way a user runs it: a small project of
tasks and tests in a temp dir, in a pytest subprocess that loads the plugin from its entry point.
"""

from __future__ import annotations

import time

import pytest

from conveyor import Tasks
from conveyor.integrations.testing import BurstWorker, DrainTimeoutError

pytest_plugins = ["pytester"]

SHOP_TASKS = '''
import asyncio

from conveyor import PermanentError, Tasks
from conveyor.worker import current_job

tasks = Tasks("shop")            # no url: CONVEYOR_REDIS_URL, as in production


@tasks.task
def receipt(data):
    current_job().progress(1, 2)
    return {"order": data["order"], "job": current_job().id, "attempt": current_job().attempt}


@tasks.task
def ship(data):
    receipt.enqueue({"order": data["order"]})     # a job that enqueues the next one
    return "shipped"


@tasks.task
async def total(data):
    await asyncio.sleep(0.01)
    current_job().progress(1.0)
    return sum(data)


@tasks.task(max_failures=1)
def explode(data):
    raise PermanentError("boom")
'''

SHOP_CONFTEST = '''
import pytest

@pytest.fixture
def conveyor_queue_name():
    return "shop"
'''

SHOP_TESTS = '''
import os

from conveyor import JobState
from conveyor.integrations.testing import aenqueued, acall_task, call_task, enqueued
from shop_tasks import explode, receipt, ship, tasks, total


def test_enqueue_assert_then_drain(conveyor_queue, conveyor_worker):
    first = ship.enqueue({"order": 1})
    [job] = enqueued(conveyor_queue, task="ship")
    assert job.id == first.id and job.data == {"order": 1}
    report = conveyor_worker.drain(tasks)
    assert (report.completed, report.failed) == (2, 0)      # ship, then the receipt it enqueued
    assert enqueued(conveyor_queue) == []
    assert conveyor_queue.get(first.id).result == "shipped"
    [done] = [conveyor_queue.get(i) for i in conveyor_queue.job_ids("completed")
              if i != first.id]
    assert done.result["order"] == 1 and done.result["job"] == done.id


def test_every_test_starts_empty(conveyor_queue, conveyor_url):
    assert sum(conveyor_queue.counts().values()) == 0
    assert os.environ["CONVEYOR_REDIS_URL"] == conveyor_url


def test_failure_for_good(conveyor_queue, conveyor_worker):
    job = explode.enqueue(None)
    report = conveyor_worker.drain(tasks)
    assert (report.completed, report.failed) == (0, 1)
    failed = conveyor_queue.get(job.id)
    assert failed.state is JobState.FAILED and "boom" in failed.error


def test_delayed_jobs_stay_unless_due_within(conveyor_queue, conveyor_worker):
    later = receipt.enqueue({"order": 2}, delay=3600)
    soon = receipt.enqueue({"order": 3}, delay=0.3)
    assert [j.id for j in enqueued(conveyor_queue, states=[JobState.DELAYED])] == [
        soon.id, later.id]
    assert conveyor_worker.drain(tasks).completed == 0
    assert conveyor_worker.drain(tasks, within=5).completed == 1
    assert conveyor_queue.get(later.id).state is JobState.DELAYED


def test_call_a_handler_directly():
    reports = []
    result = call_task(receipt, {"order": 7}, job_id="r-7", attempt=2, progress=reports)
    assert result == {"order": 7, "job": "r-7", "attempt": 2}
    assert reports == [0.5]
    assert call_task(total, (1, 2, 3)) == 6          # async handler, data through JSON


async def test_async_side(conveyor_async_queue, conveyor_worker):
    await conveyor_async_queue.enqueue("total", [4, 5])
    [job] = await aenqueued(conveyor_async_queue, task="total")
    report = await conveyor_worker.adrain(tasks, concurrency=4)
    assert report.completed == 1
    assert (await conveyor_async_queue.get(job.id)).result == 9
    assert await acall_task(total, [1, 1]) == 2
'''


@pytest.fixture
def shop(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(shop_tasks=SHOP_TASKS, test_shop=SHOP_TESTS)
    pytester.makeconftest(SHOP_CONFTEST)
    pytester.makeini(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
        "filterwarnings = error\n"
    )
    return pytester


def test_a_user_project_tests_its_tasks_with_the_plugin(shop: pytest.Pytester) -> None:
    result = shop.runpytest_subprocess("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=6)


def test_the_plugin_lists_its_fixtures_and_can_be_turned_off(shop: pytest.Pytester) -> None:
    listed = shop.runpytest_subprocess("--fixtures", "-p", "no:cacheprovider")
    listed.stdout.fnmatch_lines(["*conveyor_async_queue*", "*conveyor_redis*", "*conveyor_worker*"])
    off = shop.runpytest_subprocess("-p", "no:conveyor", "-p", "no:cacheprovider", "-k", "starts")
    off.stdout.fnmatch_lines(["*fixture 'conveyor_queue' not found*"])


def test_a_drain_has_no_idle_tail(redis_url: str, queue_name: str) -> None:
    """A worker's idle wait is 5 s; a drain ends as soon as the queue is empty, with one job
    and four free slots too (a generous bound: a loaded machine takes well under it)."""
    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task
    def work(data: None) -> None:
        time.sleep(0.3)  # still running when the worker finds the queue empty

    drainer = BurstWorker(redis_url)
    for concurrency in (1, 4):
        work.enqueue(None)
        started = time.monotonic()
        assert drainer.drain(tasks, concurrency=concurrency).completed == 1
        assert time.monotonic() - started < 4.0
    tasks.queue().close()


def test_a_drain_that_never_ends_times_out(redis_url: str, queue_name: str) -> None:
    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task
    def again(data: int) -> None:
        again.enqueue(data + 1)        # an endless chain

    again.enqueue(0)
    with pytest.raises(DrainTimeoutError, match="not drained within 1"):
        BurstWorker(redis_url).drain(tasks, timeout=1)
    tasks.queue().close()

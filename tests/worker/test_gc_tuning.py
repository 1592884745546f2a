"""The worker's young-collection threshold (worker/gc_tuning.py): raised while
a worker runs, shared by the workers of one process, restored by the last."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from conveyor import Queue
from conveyor.client.tasks import Tasks
from conveyor.errors import ConfigurationError
from conveyor.worker import WorkerSettings
from conveyor.worker.gc_tuning import young_threshold
from support.workers import WorkerRunner, wait_until


@pytest.fixture(autouse=True)
def _interpreter_default() -> Iterator[None]:
    """Each test starts from, and leaves, the interpreter's own thresholds."""
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*before)


def test_the_threshold_is_raised_inside_and_restored_after() -> None:
    with young_threshold(10_000):
        assert gc.get_threshold() == (10_000, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_none_leaves_the_interpreter_alone() -> None:
    gc.set_threshold(500, 7, 3)
    with young_threshold(None):
        assert gc.get_threshold() == (500, 7, 3)
    assert gc.get_threshold() == (500, 7, 3)


def test_a_higher_threshold_already_set_is_kept() -> None:
    gc.set_threshold(50_000, 10, 10)
    with young_threshold(10_000):
        assert gc.get_threshold()[0] == 50_000
    assert gc.get_threshold()[0] == 50_000


def test_the_last_worker_out_restores_what_the_first_found() -> None:
    first, second = young_threshold(10_000), young_threshold(20_000)
    first.__enter__()
    second.__enter__()
    assert gc.get_threshold()[0] == 20_000
    first.__exit__(None, None, None)  # the first leaves while the second runs
    assert gc.get_threshold()[0] == 20_000
    second.__exit__(None, None, None)
    assert gc.get_threshold() == (700, 10, 10)


def test_it_is_restored_when_the_block_raises() -> None:
    with pytest.raises(RuntimeError), young_threshold(10_000):
        raise RuntimeError("boom")
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.parametrize("bad", [0, -5])
def test_a_threshold_under_one_is_refused(bad: int) -> None:
    with pytest.raises(ConfigurationError, match="gc_threshold"):
        WorkerSettings(gc_threshold=bad)


@pytest.mark.parametrize(("setting", "seen"), [(10_000, 10_000), (None, 700), (2_500, 2_500)])
def test_a_running_worker_runs_its_handlers_under_its_setting(
    worker_runner: WorkerRunner, redis_url: str, queue_name: str, setting: int | None, seen: int
) -> None:
    tasks = Tasks(queue_name)

    @tasks.task(name="threshold")
    async def threshold(data: None) -> int:
        return gc.get_threshold()[0]

    with Queue(queue_name, url=redis_url) as queue:
        job = queue.enqueue("threshold", None)
        handle = worker_runner.start(tasks, gc_threshold=setting)
        assert queue.wait_result(job.id, timeout=10) == seen
        handle.stop()
    wait_until(lambda: gc.get_threshold()[0] == 700)  # the worker's exit restored it

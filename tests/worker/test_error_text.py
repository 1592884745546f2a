"""The error text a failed run stores: the standard library's traceback from the handler's
frame down, frames formatted once per place in the code (conveyor.worker.error_text)."""

from __future__ import annotations

import importlib.util
import linecache
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conveyor import JobState
from conveyor.client.tasks import Tasks
from conveyor.worker import error_text
from conveyor.worker.error_text import MAX_ERROR_TEXT, describe
from conveyor.worker.execution import failure_of
from support import process_app
from support.workers import WorkerRunner, wait_until


def standard(exc: BaseException) -> str:
    """format_exception's text, bounded as describe bounds it: describe's own text for an
    exception whose traceback no worker frame leads (every one raised in this module)."""
    text = "".join(traceback.format_exception(exc)).strip()
    return (f"{type(exc).__name__}: {exc}\n{text}")[:MAX_ERROR_TEXT]


def raised(fn: Callable[[], object]) -> BaseException:
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - the exception is the value under test
        return exc
    raise AssertionError("did not raise")


def inner(key: str) -> int:
    return {"a": 1}[key]


def middle(key: str) -> int:
    return inner(key) + 1


def with_cause() -> None:
    try:
        middle("b")
    except KeyError as exc:
        raise ConnectionError("payment gateway timed out") from exc


def with_context() -> None:
    try:
        middle("b")
    except KeyError:
        raise ValueError("during")  # noqa: B904 - the implicit context is the case


def without_context() -> None:
    try:
        middle("b")
    except KeyError:
        raise ValueError("no context shown") from None


def group() -> None:
    raise ExceptionGroup("several", [raised(with_cause), raised(with_context), ValueError("x")])  # type: ignore[list-item]


def recurse(depth: int) -> int:
    return recurse(depth + 1)


def with_notes() -> None:
    exc = ValueError("with notes")
    exc.add_note("first note")
    exc.add_note("second note")
    raise exc


def no_source() -> None:
    exec(compile("def f():\n    return 1 / 0\nf()", "<generated>", "exec"))  # noqa: S102


def syntax() -> None:
    compile("def (:", "<bad>", "exec")


def over_lines() -> int:
    return (
        inner("a")
        +
        inner("b")
    )  # fmt: skip


CASES = [with_cause, with_context, without_context, group, lambda: recurse(0), with_notes,
         no_source, syntax, over_lines]  # fmt: skip


@pytest.mark.parametrize("fn", CASES, ids=lambda fn: fn.__name__)
def test_the_text_is_the_standard_librarys_traceback_carets_included(
    fn: Callable[[], object],
) -> None:
    exc = raised(fn)
    assert describe(exc) == standard(exc)
    assert describe(exc) == standard(exc)  # again, its frames now from the cache


def test_the_head_names_the_error_and_the_text_is_bounded() -> None:
    exc = raised(with_cause)
    text = describe(exc)
    assert text.startswith("ConnectionError: payment gateway timed out\nTraceback")
    assert "The above exception was the direct cause" in text
    assert "~~~~~~~~^^^^^" in text  # the carets of `{"a": 1}[key]`
    assert len(describe(ValueError("x" * (2 * MAX_ERROR_TEXT)))) == MAX_ERROR_TEXT


def test_a_failure_at_the_same_places_takes_its_frames_from_the_cache() -> None:
    first = raised(with_cause)
    describe(first)
    before = error_text._frame_text.cache_info()
    again = raised(with_cause)
    assert describe(again) == standard(again)
    after = error_text._frame_text.cache_info()
    frames = sum(len(t.stack) for t in error_text._chain(
        traceback.TracebackException.from_exception(again)))  # fmt: skip
    assert after.hits - before.hits == frames and after.misses == before.misses
    assert after.maxsize == error_text.FRAMES_KEPT


def test_a_changed_source_line_is_formatted_anew(tmp_path: Path) -> None:
    source = tmp_path / "changing_handler.py"
    source.write_text("def handler():\n    raise RuntimeError('first version')\n")
    spec = importlib.util.spec_from_file_location("changing_handler", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["changing_handler"] = module
    try:
        spec.loader.exec_module(module)
        exc = raised(module.handler)
        assert "raise RuntimeError('first version')" in describe(exc)
        # the file changes under the running code (a deploy): the same places, new text
        source.write_text("def handler():\n    raise RuntimeError('second version')\n")
        linecache.checkcache(str(source))
        text = describe(exc)
        assert text == standard(exc)
        assert "raise RuntimeError('second version')" in text
        assert "first version')\n" not in text.split("\n", 1)[1]
    finally:
        del sys.modules["changing_handler"]


def frames_of(text: str) -> list[str]:
    """The `File "…", line N, in name` lines of a stored error, in order."""
    return [line.strip() for line in text.splitlines() if line.startswith('  File "')]


def helper_that_fails(data: Any) -> None:
    raise ValueError(f"bad value {data!r}")


def test_a_run_stores_its_traceback_from_the_handlers_frame_down(
    queue: Any, redis_url: str, queue_name: str, worker_runner: WorkerRunner
) -> None:
    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task
    def sync_handler(data: Any) -> None:
        helper_that_fails(data)

    @tasks.task
    async def async_handler(data: Any) -> None:
        helper_that_fails(data)

    ids = {name: queue.enqueue(name, 1, max_failures=1).id
           for name in ("sync_handler", "async_handler")}  # fmt: skip
    worker_runner.start(tasks)
    wait_until(lambda: all((j := queue.get(i)) is not None and j.state is JobState.FAILED
                           for i in ids.values()))  # fmt: skip
    for name, job_id in ids.items():
        error = queue.get(job_id).error
        assert error.startswith("ValueError: bad value 1\nTraceback (most recent call last):")
        frames = frames_of(error)
        # the worker's runtime and its thread pool called the handler: not in the text
        assert frames[0].endswith(f"in {name}"), error
        assert frames[1].endswith("in helper_that_fails"), error
        assert len(frames) == 2, error
        assert "conveyor/worker/" not in error and "concurrent/futures" not in error


def test_a_child_process_stores_the_handlers_frame_first(
    redis_url: str, queue_name: str, sync_queue: Any, worker_runner: WorkerRunner
) -> None:
    tasks = Tasks(queue_name, url=redis_url)
    tasks.handlers.update(process_app.tasks.handlers)
    job_id = sync_queue.enqueue("raises", "soft", max_failures=1).id
    worker_runner.start(tasks, processes=1)
    wait_until(lambda: (j := sync_queue.get(job_id)) is not None and j.state is JobState.FAILED)
    error = sync_queue.get(job_id).error
    assert error.startswith("ValueError: bad value 'soft'"), error
    assert frames_of(error)[0].endswith("in raises"), error
    assert "conveyor/worker/" not in error


def test_a_failure_of_the_worker_itself_keeps_its_whole_traceback() -> None:
    # fails in describe (error_text.py), called by failure_of (execution.py)
    exc = raised(lambda: failure_of(None))  # type: ignore[arg-type]
    assert exc.__traceback__ is not None
    in_worker = exc.__traceback__.tb_next.tb_next  # past this test's two frames
    assert in_worker is not None and in_worker.tb_next is not None  # two worker frames
    assert all(error_text._calls_handlers(t.tb_frame.f_code)
               for t in (in_worker, in_worker.tb_next))  # fmt: skip
    assert error_text._from_handler(in_worker) is in_worker  # all the worker's: kept whole
    assert error_text._from_handler(exc.__traceback__) is exc.__traceback__  # a test frame first
    assert error_text._from_handler(None) is None

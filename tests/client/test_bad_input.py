"""Every bad input raises a typed error and writes nothing to Redis."""

from __future__ import annotations

import collections
import enum
import math
from datetime import datetime
from typing import Any

import pytest
import redis

from conveyor import Queue, QueueSettings, serializers
from conveyor.errors import (
    ConveyorError,
    InvalidJobIdError,
    InvalidNameError,
    NotSerializableError,
    PayloadTooLargeError,
    UnknownOptionError,
    ValidationError,
)


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


_CIRCULAR: list[Any] = []
_CIRCULAR.append(_CIRCULAR)

BAD_ENQUEUES: list[tuple[str, dict[str, Any], type[ConveyorError]]] = [
    ("nan", {"data": math.nan}, NotSerializableError),
    ("infinity", {"data": {"x": math.inf}}, NotSerializableError),
    ("object", {"data": object()}, NotSerializableError),
    ("set", {"data": {1, 2}}, NotSerializableError),
    ("bytes", {"data": b"\xff\xfe"}, NotSerializableError),
    ("too deep", {"data": _nested(100_000)}, NotSerializableError),
    ("deeper than workers decode", {"data": _nested(201)}, NotSerializableError),
    ("lone surrogate", {"data": "\ud800"}, NotSerializableError),
    ("circular", {"data": {"self": _CIRCULAR}}, NotSerializableError),
    ("too big", {"data": "x" * (512 * 1024)}, PayloadTooLargeError),
    ("empty id", {"id": ""}, InvalidJobIdError),
    ("id with newline", {"id": "a\nb"}, InvalidJobIdError),
    ("id with NUL", {"id": "a\x00b"}, InvalidJobIdError),
    ("id with space", {"id": "a b"}, InvalidJobIdError),
    ("id of 10 KB", {"id": "x" * 10_240}, InvalidJobIdError),
    ("id not a string", {"id": 5}, InvalidJobIdError),
    ("unknown option", {"job_id": "x"}, UnknownOptionError),
    ("delay and run_at", {"delay": 1, "run_at": 10**10}, ValidationError),
    ("negative delay", {"delay": -1}, ValidationError),
    ("delay not a number", {"delay": "soon"}, ValidationError),
    ("naive run_at", {"run_at": datetime(2030, 1, 1)}, ValidationError),
    ("priority too big", {"priority": 2**21 + 1}, ValidationError),
    ("priority negative", {"priority": -1}, ValidationError),
    ("priority bad name", {"priority": "urgent"}, ValidationError),
    ("max_failures zero", {"max_failures": 0}, ValidationError),
    ("max_backoff below min", {"min_backoff": 10, "max_backoff": 1}, ValidationError),
    ("update_run_at bad", {"update_run_at": "sometimes"}, ValidationError),
    ("lifo not bool", {"lifo": 1}, ValidationError),
    ("group with brace", {"group": "a{b}"}, InvalidNameError),
]


@pytest.mark.parametrize(
    ("case", "kwargs", "error"), BAD_ENQUEUES, ids=[c[0] for c in BAD_ENQUEUES]
)
def test_bad_enqueue_raises_and_writes_nothing(
    queue: Any, redis_client: redis.Redis, case: str, kwargs: dict[str, Any], error: type
) -> None:
    kwargs = dict(kwargs)  # the parameter is shared by the sync and async runs
    data = kwargs.pop("data", None)
    before = redis_client.dbsize()
    with pytest.raises(error) as raised:
        queue.enqueue("task", data, **kwargs)
    assert isinstance(raised.value, ConveyorError)
    assert str(raised.value)
    assert redis_client.dbsize() == before


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"when": datetime(2026, 1, 1)}, 'data["when"] is of type datetime'),
        ({"rows": [1, {"ok": {1, 2}}]}, 'data["rows"][1]["ok"] is of type set'),
        ([0, 1, math.inf], "data[2] is inf (JSON has no NaN or Infinity)"),
        ({"by": {(1, 2): "pair"}}, 'data["by"] has a key of type tuple: (1, 2)'),
        (object(), "data is of type object"),
    ],
)
def test_not_serialisable_names_the_path_of_the_value(queue: Any, data: Any, named: str) -> None:
    with pytest.raises(NotSerializableError) as raised:
        queue.enqueue("task", data)
    assert named in str(raised.value)


def test_nesting_up_to_the_limit_is_accepted(queue: Any) -> None:
    assert queue.enqueue("task", _nested(200)).outcome == "created"
    assert queue.enqueue("task", {"s": "[[[[" * 100}).outcome == "created"  # brackets in text


def test_unknown_option_is_also_a_type_error(queue: Any) -> None:
    with pytest.raises(TypeError):
        queue.enqueue("task", None, colour="red")


def test_payload_at_the_limit_is_accepted(queue: Any) -> None:
    data = "x" * (512 * 1024 - 2)  # the JSON string adds two quotes
    assert queue.enqueue("task", data).outcome == "created"


def test_payload_limit_is_configurable(redis_url: str, queue_name: str) -> None:
    with Queue(queue_name, url=redis_url, settings=QueueSettings(max_payload=100)) as q:
        q.enqueue("task", "x" * 98)
        with pytest.raises(PayloadTooLargeError):
            q.enqueue("task", "x" * 99)


@pytest.mark.parametrize(
    "name", ["", "a:b", "a{b}", "a}", "*", "a b", "a\nb", "a\x00", "-lead", "x" * 129, "é"]
)
def test_bad_queue_names_are_refused(redis_url: str, name: str) -> None:
    with pytest.raises(InvalidNameError):
        Queue(name, url=redis_url)


@pytest.mark.parametrize(
    "task", ["", "a\nb", "a\tb", "a\x7f", "a\x85", "a\ud800", "x" * 201, None]
)
def test_bad_task_names_are_refused(queue: Any, redis_client: redis.Redis, task: Any) -> None:
    before = redis_client.dbsize()
    with pytest.raises(InvalidNameError):
        queue.enqueue(task, None)
    assert redis_client.dbsize() == before


@pytest.mark.parametrize("task", ["a b", "é", "x" * 200, "\u00a0", "\u200b", "😀", "a:b{c}*"])
def test_task_names_are_any_text_without_control_characters(queue: Any, task: str) -> None:
    # protocol §1 "Text": defined by code point ranges, so every implementation agrees
    job = queue.enqueue(task, None)
    assert queue.get(job.id).task == task


def test_ids_with_special_characters_stay_in_their_queue(queue: Any) -> None:
    for job_id in ["a:b", "{x}", "*", "job:1", "ready"]:
        assert queue.enqueue("t", job_id, id=job_id).outcome == "created"
        assert queue.get(job_id).data == job_id
    assert sum(queue.counts().values()) == 5


def test_bad_ids_on_lookups_are_refused(queue: Any) -> None:
    with pytest.raises(InvalidJobIdError):
        queue.cancel("a\nb")
    with pytest.raises(InvalidJobIdError):
        queue.wait_result("", timeout=1)


def test_a_results_bad_value_is_named_from_result() -> None:
    with pytest.raises(NotSerializableError, match=r'the result is not .*: result\["at"\] is of'):
        serializers.dumps({"at": datetime(2026, 1, 1)}, what="the result")


@pytest.mark.parametrize("job_id", ["a b", "a\nb", "", "x" * 257, "é"])
def test_get_of_an_id_no_job_can_have_is_none(queue: Any, job_id: str) -> None:
    """A status endpoint passes whatever id it was given: no job has it, so None."""
    assert queue.get(job_id) is None
    with pytest.raises(InvalidJobIdError):
        queue.get(42)  # not text at all: a programming error, said as such


def test_what_json_changes_is_what_the_jobs_guide_says(queue: Any) -> None:
    """The table of docs/guide/jobs.md, "Serialisation": what a handler reads back."""

    class Colour(enum.StrEnum):
        RED = "red"

    sent = {
        "tuple": (1, 2),
        "int keys": {1: "a"},
        "other keys": {True: 1, None: 2, 1.5: 3},
        "enum": Colour.RED,
        "defaultdict": collections.defaultdict(int, a=1),
        "numbers": [-0.0, 1e300, 2**100],
    }
    job = queue.enqueue("t", sent)
    assert queue.get(job.id).data == {
        "tuple": [1, 2],
        "int keys": {"1": "a"},
        "other keys": {"true": 1, "null": 2, "1.5": 3},
        "enum": "red",
        "defaultdict": {"a": 1},
        "numbers": [-0.0, 1e300, 2**100],
    }

"""Deduplication through both clients (protocol §16.3): the caller learns
what happened and which job stands; bad options write nothing."""

from __future__ import annotations

import time
from typing import Any

import pytest

from conveyor import JobRequest, JobState
from conveyor.errors import ValidationError


def test_simple_mode_reports_the_standing_job(queue: Any) -> None:
    first = queue.enqueue("t", {"n": 1}, dedup="user-7")
    assert (first.outcome, first.state) == ("created", JobState.WAITING)
    again = queue.enqueue("t", {"n": 2}, dedup="user-7")
    assert (again.outcome, again.id, again.state) == ("deduplicated", first.id, JobState.WAITING)
    assert queue.get(first.id).data == {"n": 1}
    assert queue.counts()[JobState.WAITING] == 1
    events = [e for e in queue.events(after="0-0") if e.name == "deduplicated"]
    assert [(e.job_id, e.fields["dedup"]) for e in events] == [(first.id, "user-7")]


def test_a_bulk_enqueue_maps_each_job_to_the_one_that_stands(queue: Any) -> None:
    results = queue.enqueue_many(
        [
            JobRequest("t", 1, {"dedup": "a"}),
            JobRequest("t", 2, {"dedup": "b"}),
            JobRequest("t", 3, {"dedup": "a"}),
            JobRequest("t", 4),
        ]
    )
    assert [r.outcome for r in results] == ["created", "created", "deduplicated", "created"]
    assert results[2].id == results[0].id
    assert len({results[0].id, results[1].id, results[3].id}) == 3


def test_throttle_ignores_for_the_ttl(queue: Any) -> None:
    first = queue.enqueue("t", None, dedup="ping", dedup_ttl=0.3)
    assert queue.enqueue("t", None, dedup="ping", dedup_ttl=0.3).id == first.id
    time.sleep(0.4)
    later = queue.enqueue("t", None, dedup="ping", dedup_ttl=0.3)
    assert later.outcome == "created" and later.id != first.id


def test_debounce_keeps_the_latest_data_and_pushes_the_run_back(queue: Any) -> None:
    first = queue.enqueue("t", {"v": 1}, dedup="save-doc-9", debounce=30)
    assert (first.outcome, first.state) == ("created", JobState.DELAYED)
    due = queue.get(first.id).run_at
    time.sleep(0.01)
    second = queue.enqueue("t", {"v": 2}, dedup="save-doc-9", debounce=30)
    assert (second.outcome, second.id, second.state) == ("updated", first.id, JobState.DELAYED)
    job = queue.get(first.id)
    assert job.data == {"v": 2} and job.run_at > due
    assert queue.counts()[JobState.DELAYED] == 1


@pytest.mark.parametrize(
    "options",
    [
        {"dedup": "has space"},
        {"dedup": ""},
        {"dedup_ttl": 5},
        {"debounce": 5},
        {"dedup": "k", "dedup_ttl": 5, "debounce": 5},
        {"dedup": "k", "dedup_ttl": 0},
        {"dedup": "k", "debounce": 5, "delay": 1},
    ],
)
def test_bad_dedup_options_write_nothing(queue: Any, options: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        queue.enqueue("t", None, id="x", **options)
    assert queue.get("x") is None

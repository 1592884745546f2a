"""enqueue_many(..., if_exists="skip"): given ids created unless they are a job already,
through both clients (enqueue_skip.lua underneath)."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from conveyor import JobRequest, JobState, Queue, QueueSettings
from conveyor.errors import UnknownOptionError, ValidationError
from conveyor.hooks import Hook
from conveyor.options import PRIORITIES


def _queue_keys(client: redis.Redis, name: str) -> dict[bytes, Any]:
    """Every key of queue `name` with its DUMP: what a refused call must leave as it was."""
    keys = client.scan_iter(match=f"conveyor:{{{name}}}:*", count=1000)
    return {key: client.dump(key) for key in sorted(keys)}


def _created_events(queue: Any) -> list[str]:
    return [e.job_id for e in queue.events(after="0", count=10_000) if e.name == "created"]


def test_existing_jobs_are_left_alone_and_reported_as_exists(queue: Any) -> None:
    queue.enqueue("t", {"v": 1}, id="waiting")
    queue.enqueue("t", {"v": 1}, id="delayed", delay=60)
    done = queue.enqueue_many(
        [
            JobRequest("t", {"v": 2}, {"id": "waiting", "priority": "high"}),
            JobRequest("t", {"v": 2}, {"id": "new", "max_failures": 7, "timeout": 9}),
            JobRequest("t", {"v": 2}, {"id": "delayed"}),
            ("t", {"v": 3}),  # no id: a generated one, never a job yet
        ],
        if_exists="skip",
    )
    assert [(d.id, d.queue, d.outcome, d.state) for d in done[:3]] == [
        ("waiting", queue.name, "exists", JobState.WAITING),
        ("new", queue.name, "created", JobState.WAITING),
        ("delayed", queue.name, "exists", JobState.DELAYED),
    ]
    assert (done[3].outcome, done[3].state) == ("created", JobState.WAITING)
    untouched = queue.get("waiting")
    assert (untouched.data, untouched.priority) == ({"v": 1}, PRIORITIES["normal"])
    assert queue.get("delayed").state is JobState.DELAYED
    new = queue.get("new")
    assert (new.data, new.max_failures, new.timeout) == ({"v": 2}, 7, 9)
    assert queue.get(done[3].id).data == {"v": 3}
    # no event for the jobs left alone
    assert sorted(_created_events(queue)) == sorted(["waiting", "delayed", "new", done[3].id])


def test_a_rerun_creates_nothing_twice(queue: Any, redis_client: redis.Redis) -> None:
    """The same batch twice (three chunks each): every job once, the second run reports
    every job `exists` and writes nothing at all."""
    jobs = [JobRequest("t", i, {"id": f"j{i}"}) for i in range(1200)]
    first = queue.enqueue_many(jobs, chunk_size=500, if_exists="skip")
    assert {(d.outcome, d.state) for d in first} == {("created", JobState.WAITING)}
    assert [d.id for d in first] == [f"j{i}" for i in range(1200)]
    before = _queue_keys(redis_client, queue.name)
    again = queue.enqueue_many(jobs, chunk_size=500, if_exists="skip")
    assert [(d.id, d.outcome, d.state) for d in again] == [
        (f"j{i}", "exists", JobState.WAITING) for i in range(1200)
    ]
    assert _queue_keys(redis_client, queue.name) == before
    assert queue.counts()[JobState.WAITING] == 1200
    assert queue.job_ids(JobState.WAITING, offset=0, limit=3) == ["j0", "j1", "j2"]


def test_a_rerun_never_runs_a_finished_job_again(redis_url: str, queue_name: str) -> None:
    with Queue(queue_name, url=redis_url) as q:
        q.enqueue_many([JobRequest("t", 1, {"id": "a"})], if_exists="skip")
        q.client.hset(q.core.keys.job("a"), "state", "completed")  # as if it ran
        q.client.zrem(q.core.keys.ready, "a")
        done = q.enqueue_many(
            [JobRequest("t", 1, {"id": "a"}), JobRequest("t", 2, {"id": "b"})], if_exists="skip"
        )
        assert [(d.outcome, d.state) for d in done] == [
            ("exists", JobState.COMPLETED), ("created", JobState.WAITING),
        ]  # fmt: skip
        assert q.job_ids(JobState.WAITING) == ["b"]


def test_the_same_id_twice_in_one_batch_is_created_once(queue: Any) -> None:
    done = queue.enqueue_many(
        [JobRequest("t", 1, {"id": "x"}), JobRequest("t", 2, {"id": "x"})], if_exists="skip"
    )
    assert [(d.id, d.outcome, d.state) for d in done] == [
        ("x", "created", JobState.WAITING), ("x", "exists", JobState.WAITING),
    ]  # fmt: skip
    assert queue.get("x").data == 1


@pytest.mark.parametrize(
    "options",
    [
        {"delay": 5},
        {"run_at": 2_000_000_000},
        {"group": "g"},
        {"lifo": True},
        {"lifo": False},  # refused by name, whatever the value
        {"headers": {"a": "b"}},
        {"index": {"k": "v"}},
        {"update_data": False},
        {"expires": 60},
        {"dedup": "k"},
        {"concurrency_keys": ["k"]},
    ],
)
def test_options_enqueue_skip_cannot_take_are_refused_before_anything_is_written(
    queue: Any, redis_client: redis.Redis, options: dict[str, Any]
) -> None:
    queue.enqueue("t", 1, id="there")
    before = _queue_keys(redis_client, queue.name)
    jobs = [JobRequest("t", 1, {"id": "a"}), JobRequest("t", 2, {"id": "b", **options})]
    with pytest.raises(
        UnknownOptionError, match=f"job 1 .*cannot take: \\['{next(iter(options))}'\\]"
    ):
        queue.enqueue_many(jobs, if_exists="skip")
    assert _queue_keys(redis_client, queue.name) == before


def test_bad_input_is_a_typed_error_that_writes_nothing(
    queue: Any, redis_client: redis.Redis
) -> None:
    queue.enqueue("t", 1, id="there")
    before = _queue_keys(redis_client, queue.name)
    good = [JobRequest("t", i, {"id": f"g{i}"}) for i in range(600)]
    bad_jobs = [
        [*good, JobRequest("t", float("nan"), {"id": "n"})],  # data that is not JSON
        [*good, JobRequest("t", 1, {"id": ""})],  # an empty id
        [*good, JobRequest("t", 1, {"id": "p", "priority": -1})],
        [*good, JobRequest("t", 1, {"id": "u", "unknown": 1})],
        [*good, JobRequest("", 1, {"id": "e"})],  # no task name
    ]
    for jobs in bad_jobs:
        with pytest.raises(ValidationError):
            queue.enqueue_many(jobs, chunk_size=500, if_exists="skip")
    for bad in ("Skip", "ignore", None, True):
        with pytest.raises(ValidationError, match="if_exists"):
            queue.enqueue_many(good, if_exists=bad)
    assert _queue_keys(redis_client, queue.name) == before


def test_the_default_still_updates_a_waiting_job(queue: Any) -> None:
    queue.enqueue("t", {"v": 1}, id="same")
    (done,) = queue.enqueue_many([JobRequest("t", {"v": 2}, {"id": "same"})])
    assert done.outcome == "updated"
    assert queue.get("same").data == {"v": 2}
    (done,) = queue.enqueue_many([JobRequest("t", {"v": 3}, {"id": "same"})], if_exists="update")
    assert (done.outcome, queue.get("same").data) == ("updated", {"v": 3})


class _Tracing(Hook):
    """Adds headers, as the OpenTelemetry hook does; remembers what after_enqueue heard."""

    def __init__(self) -> None:
        self.errors: list[BaseException | None] = []

    def before_enqueue(self, queue: str, task: str, data: Any, options: dict[str, Any]) -> None:
        options["headers"] = {"traceparent": "00-1-2-01"}

    def after_enqueue(
        self,
        queue: str,
        task: str,
        options: dict[str, Any],
        *,
        job_id: str | None,
        error: BaseException | None,
    ) -> None:
        self.errors.append(error)


def test_options_a_hook_adds_count_too(
    redis_url: str, queue_name: str, redis_client: redis.Redis
) -> None:
    hook = _Tracing()
    with Queue(queue_name, url=redis_url, settings=QueueSettings(hooks=(hook,))) as q:
        with pytest.raises(UnknownOptionError, match="headers"):
            q.enqueue_many([JobRequest("t", 1, {"id": "a"})], if_exists="skip")
        assert _queue_keys(redis_client, queue_name) == {}
        assert [type(e) for e in hook.errors] == [UnknownOptionError]

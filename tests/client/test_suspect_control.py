"""An operator's word on suspects (jobs whose last worker died with them), through both
clients: release one to run as any job, fail one, and the typed errors for the rest."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from conveyor import JobState
from conveyor.client.transport import SyncRunner
from conveyor.errors import InvalidJobIdError, JobNotFoundError, NotASuspectError
from conveyor.protocol import ops


def _core(queue: Any) -> Any:
    return queue.core if hasattr(queue, "core") else queue.inner.core


def _suspect(queue: Any, redis_client: redis.Redis, job_id: str) -> None:
    queue.enqueue("t", None, id=job_id)
    redis_client.hset(_core(queue).keys.job(job_id), "stalls", 1)


def _claim(queue: Any, redis_client: redis.Redis) -> list[ops.ClaimedJob]:
    core = _core(queue)
    call = ops.claim(
        core.keys, worker_id="w", count=5, lease_ms=10_000, token="t", promote=10,
        events_maxlen=100, alone=False, isolates=True,
    )  # fmt: skip
    return ops.decode_claim(SyncRunner(redis_client, core.scripts).run(call)).jobs


def test_a_suspect_reads_as_one_until_released(queue: Any, redis_client: redis.Redis) -> None:
    _suspect(queue, redis_client, "s")
    queue.enqueue("t", None, id="plain")
    assert queue.get("s").suspect and not queue.get("plain").suspect
    assert queue.release_suspect("s") is None
    job = queue.get("s")
    assert (job.suspect, job.trusted, job.stalls) == (False, True, 1)
    assert [(j.id, j.stalls) for j in _claim(queue, redis_client)] == [("s", 0), ("plain", 0)]


def test_failing_a_waiting_suspect_fails_it_unrun(queue: Any, redis_client: redis.Redis) -> None:
    _suspect(queue, redis_client, "s")
    assert queue.fail_suspect("s") == "failed"
    job = queue.get("s")
    assert job.state is JobState.FAILED and not job.suspect
    assert (job.error or "").startswith("SuspectFailedError")


def test_failing_a_running_suspect_aborts_it(queue: Any, redis_client: redis.Redis) -> None:
    _suspect(queue, redis_client, "s")
    core = _core(queue)
    call = ops.claim(
        core.keys, worker_id="w", count=1, lease_ms=10_000, token="t", promote=10,
        events_maxlen=100, isolates=True,
    )  # fmt: skip
    SyncRunner(redis_client, core.scripts).run(call)
    assert queue.fail_suspect("s") == "aborting"
    assert redis_client.hget(core.keys.job("s"), "abort") == b"1"


def test_bad_input_is_a_typed_error_and_changes_nothing(
    queue: Any, redis_client: redis.Redis
) -> None:
    queue.enqueue("t", None, id="plain")
    before = redis_client.hgetall(_core(queue).keys.job("plain"))
    with pytest.raises(NotASuspectError):
        queue.release_suspect("plain")
    with pytest.raises(NotASuspectError):
        queue.fail_suspect("plain")
    with pytest.raises(JobNotFoundError):
        queue.release_suspect("missing")
    with pytest.raises(InvalidJobIdError):
        queue.fail_suspect("")
    assert redis_client.hgetall(_core(queue).keys.job("plain")) == before

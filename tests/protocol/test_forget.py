"""forget.lua: archived finished jobs are deleted, each only if it is still the copied run."""

from __future__ import annotations

import pytest

from conveyor.protocol import ops

from .harness import Proto


def _forget(q: Proto, *items: tuple[str, int]) -> tuple[int, int]:
    return ops.decode_forget(q.run(ops.forget(q.keys, items)))


@pytest.mark.parametrize("state", ["completed", "failed"])
def test_a_finished_job_is_deleted_with_its_index_entries(q: Proto, state: str) -> None:
    q.put("a", state, index={"user_id": 1})
    q.enqueue("keep", index={"user_id": 1})
    q.r.rpush(q.keys.job_log("a"), "a line")
    finished = int(q.job("a")["finished_at"])
    assert _forget(q, ("a", finished)) == (1, 0)
    assert not q.r.exists(q.keys.job("a"), q.keys.job_log("a"))
    assert q.members(q.keys.completed) == q.members(q.keys.failed) == []
    assert q.r.zrange(q.keys.base + "idx:user_id:1", 0, -1) == [b"keep"]
    assert _forget(q, ("a", finished)) == (0, 1)  # again: nothing left to do


def test_a_run_other_than_the_copied_one_is_kept(q: Proto) -> None:
    q.put("done", "completed")
    q.put("waiting", "waiting")
    finished = int(q.job("done")["finished_at"])
    # finished at another time (enqueued again and run anew), not finished, or gone
    assert _forget(q, ("done", finished - 1), ("waiting", finished), ("gone", finished)) == (0, 3)
    assert q.job("done")["state"] == "completed" and q.members(q.keys.completed) == ["done"]
    assert q.job("waiting")["state"] == "waiting"
    assert _forget(q) == (0, 0)

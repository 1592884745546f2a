"""progress.lua: a running job's progress, fenced by its token."""

from __future__ import annotations

from .harness import Proto


def test_progress_is_stored_and_announced(q: Proto) -> None:
    q.start("a", token="t")
    assert q.progress("a", "t", 0.25) == 1
    assert q.progress("a", "t", 0.5) == 1
    assert q.job("a")["progress"] == "0.5"
    assert q.events("progress") == [
        {"event": "progress", "id": "a", "progress": "0.25"},
        {"event": "progress", "id": "a", "progress": "0.5"},
    ]


def test_a_wrong_token_is_refused_and_changes_nothing(q: Proto) -> None:
    q.start("a", token="t")
    before = q.snapshot("a")
    assert q.progress("a", "other", 0.9) == 0
    assert q.snapshot("a") == before
    assert "progress" not in q.job("a")


def test_progress_of_a_job_not_running_is_refused(q: Proto) -> None:
    q.enqueue("waiting")
    assert q.progress("waiting", "", 0.1) == 0
    assert q.progress("missing", "t", 0.1) == 0
    q.start("done", token="t", priority=0)
    q.complete_one("done", "t")
    assert q.progress("done", "t", 1.0) == 0
    assert "progress" not in q.job("done")
    assert q.events("progress") == []
    assert q.r.exists(q.keys.job("missing")) == 0

"""Scenarios 30-33: execution (issue 17): children killed mid-job, a child past its memory
limit, a handler blocking the event loop, aborts racing completions."""

from __future__ import annotations

from chaos_support import Runs, verdict


def test_children_killed_mid_job_fail_only_their_jobs(scenario: Runs) -> None:
    verdict(scenario("child-killed"))


def test_a_child_past_its_memory_limit_is_recycled(scenario: Runs) -> None:
    verdict(scenario("child-memory"))


def test_a_handler_blocking_the_loop_fails_alone(scenario: Runs) -> None:
    verdict(scenario("loop-blocker"))


def test_aborts_racing_completions_end_each_job_once(scenario: Runs) -> None:
    verdict(scenario("abort-races"))


def test_only_a_child_killed_after_its_handler_ended_explains_a_second_end() -> None:
    from chaos.ledger import Entry
    from chaos.scenarios.execution import _killed_after_finish

    def entry(kind: str, job_id: str, pid: int, mono: float) -> Entry:
        return Entry(kind, job_id, 1, pid, mono, mono, "")

    entries = [
        entry("finish", "a", 10, 1.0), entry("kill", "child", 0, 1.1),  # the kill names no pid
        entry("finish", "b", 11, 1.0), entry("kill", "child", 11, 1.2),  # after b's end: explained
        entry("kill", "child", 12, 0.5), entry("finish", "c", 12, 1.0),  # before c's end: not
        entry("finish", "a", 13, 2.0), entry("finish", "b", 14, 2.0), entry("finish", "c", 15, 2.0),
    ]  # fmt: skip
    assert _killed_after_finish(entries, ["a", "b", "c"]) == {"b"}

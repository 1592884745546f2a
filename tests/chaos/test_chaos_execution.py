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

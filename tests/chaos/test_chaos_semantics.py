"""Scenarios 26-27: rate limits hold in every window under several workers (§3.2);
a resumable job survives SIGKILLs of its worker (§16.7)."""

from __future__ import annotations

from chaos_support import Runs, verdict


def test_no_window_exceeds_the_rate_with_several_workers(scenario: Runs) -> None:
    verdict(scenario("rate-limit-windows"))


def test_a_resumable_job_survives_sigkills_without_redoing_finished_items(
    scenario: Runs,
) -> None:
    verdict(scenario("resumable-sigkill"))

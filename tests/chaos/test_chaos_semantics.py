"""Scenario 19: rate limits hold in every window under several workers (§3.2)."""

from __future__ import annotations

from chaos_support import Runs, verdict


def test_no_window_exceeds_the_rate_with_several_workers(scenario: Runs) -> None:
    verdict(scenario("rate-limit-windows"))

"""Scenario 18: the soak (20,000 jobs here; 1,000,000 with --runslow and in `make chaos`)."""

from __future__ import annotations

from chaos_support import Runs, verdict


def test_soak_memory_flat_and_redis_back_to_baseline(scenario: Runs) -> None:
    verdict(scenario("soak"))

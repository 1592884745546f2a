"""Scenario 34: Redis Sentinel failovers under a min_replicas producer and workers."""

from __future__ import annotations

from chaos_support import Runs, verdict


def test_a_sentinel_failover_loses_no_acknowledged_job(scenario: Runs) -> None:
    verdict(scenario("sentinel-failover"))

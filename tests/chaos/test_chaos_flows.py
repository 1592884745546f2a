"""Scenarios 24 and 25: flows while workers and drainers are SIGKILLed, on one Redis and on a
3-master cluster (docs/protocol.md §14.5): every parent once, after all its children."""

from __future__ import annotations

from chaos_support import Runs, verdict


def test_flows_survive_sigkilled_workers_and_drainers(scenario: Runs) -> None:
    verdict(scenario("flows-sigkill"))


def test_flows_survive_sigkills_on_a_cluster(scenario: Runs) -> None:
    verdict(scenario("flows-sigkill-cluster"))

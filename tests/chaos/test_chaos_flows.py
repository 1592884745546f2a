"""Scenarios 24 and 25: flows while workers and drainers are SIGKILLed, on one Redis and on a
3-master cluster (docs/protocol.md §14.5): every parent once, after all its children. Scenario
35: children in three queues complete, fail under every policy and are cancelled while workers
are SIGKILLed: every parent ends once, in the state its policies say."""

from __future__ import annotations

from chaos_support import Runs, verdict


def test_flows_survive_sigkilled_workers_and_drainers(scenario: Runs) -> None:
    verdict(scenario("flows-sigkill"))


def test_flows_survive_sigkills_on_a_cluster(scenario: Runs) -> None:
    verdict(scenario("flows-sigkill-cluster"))


def test_every_ending_crosses_three_queues_under_sigkills(scenario: Runs) -> None:
    verdict(scenario("flow-endings"))

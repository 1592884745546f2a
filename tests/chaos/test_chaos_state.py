"""Scenarios 13-15: hostile input, corrupt state in Redis, many producers on one id."""

from __future__ import annotations

import pytest
from chaos.scenarios.state import CORRUPTIONS
from chaos_support import Runs, verdict

# B3, B4, B5 and B7 (all fixed) were found by the cases non-numeric-options,
# non-integer-attempts, deeply-nested-data and unknown-state.


def test_hostile_input_is_refused_before_any_write_without_collisions(scenario: Runs) -> None:
    verdict(scenario("hostile-input"), exclude=["lone surrogate", "accept data nested"])


def test_lone_surrogate_is_a_typed_error(scenario: Runs) -> None:
    """B8 (fixed)."""
    verdict(scenario("hostile-input"), only=["lone surrogate"])


def test_data_at_the_producers_depth_limit_does_not_kill_the_worker(scenario: Runs) -> None:
    """B5 (fixed)."""
    verdict(scenario("hostile-input"), only=["accept data nested"])


@pytest.mark.parametrize("case", [c.name for c in CORRUPTIONS])
def test_corrupt_state_is_failed_with_a_reason_and_the_worker_survives(
    scenario: Runs, case: str
) -> None:
    verdict(scenario("corrupt-state"), only=[f"{case}: "])


def test_fifty_producers_on_one_id_make_one_job(scenario: Runs) -> None:
    verdict(scenario("same-id-race"))

"""Scenarios 1-5: workers killed, frozen, starved, stopped and poisoned (docs/reliability.md)."""

from __future__ import annotations

from chaos_support import Runs, verdict


def test_sigkill_loop_loses_nothing_and_bounds_duplicates(scenario: Runs) -> None:
    verdict(scenario("worker-sigkill-loop"))


def test_sigstop_past_lease_reruns_elsewhere_and_fences_the_stale_worker(scenario: Runs) -> None:
    verdict(scenario("worker-sigstop-past-lease"))


def test_cpu_hog_keeps_its_lease(scenario: Runs) -> None:
    verdict(scenario("cpu-hog-keeps-lease"))


def test_sigterm_finishes_short_jobs_and_gives_back_long_ones(scenario: Runs) -> None:
    verdict(scenario("sigterm-graceful"), exclude=["work_sync: worker A exited", "0 duplicated"])


def test_sigterm_with_a_sync_handler_past_grace_runs_it_once(scenario: Runs) -> None:
    """B2 (fixed): the worker exits without joining the handler's thread."""
    verdict(scenario("sigterm-graceful"), only=["work_sync: worker A exited", "0 duplicated"])


def test_poison_job_fails_after_max_stalls_without_holding_others_up(scenario: Runs) -> None:
    """B1 and B1b (fixed): a suspect runs on a worker that runs nothing else."""
    verdict(scenario("poison-job"))


def test_suspects_cost_one_slot_each_and_every_queue_keeps_its_throughput(scenario: Runs) -> None:
    verdict(scenario("suspects-keep-throughput"))

"""Scenarios 19-23: a worker partitioned past its lease, a producer killed inside
enqueue_many, Redis restarted again and again, a memory hog under an OOM killer, and an
upsert storm of 100 producer processes."""

from __future__ import annotations

from chaos_support import Runs, verdict


def test_a_partitioned_worker_is_fenced_and_its_jobs_completed_once(scenario: Runs) -> None:
    verdict(scenario("worker-partition"))


def test_a_producer_killed_inside_enqueue_many_then_resending_loses_nothing(
    scenario: Runs,
) -> None:
    verdict(scenario("producer-killed-in-enqueue-many"))


def test_redis_restarted_repeatedly_with_aof_always_loses_nothing(scenario: Runs) -> None:
    verdict(scenario("redis-restarts"))


def test_a_memory_hog_killed_by_an_oom_killer_stays_isolated_when_re_enqueued(
    scenario: Runs,
) -> None:
    """Defect 1 of issue 15: a re-enqueue no longer erases the hog's stall history."""
    verdict(scenario("memory-hog"))


def test_an_upsert_storm_never_overlaps_runs_of_one_id(scenario: Runs) -> None:
    verdict(scenario("upsert-storm"))

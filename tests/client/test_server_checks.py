"""The checks made on connect: server version, eviction policy, protocol version."""

from __future__ import annotations

import logging
import time

import pytest
import redis

from conveyor import Queue, QueueSettings
from conveyor.client.core import QueueCore
from conveyor.errors import (
    ConfigurationError,
    ConnectionLostError,
    EvictionPolicyError,
    ProtocolVersionError,
    UnsupportedServerError,
)
from support.servers import ServerFactory


def test_old_servers_are_refused() -> None:
    core = QueueCore("q", QueueSettings())
    with pytest.raises(UnsupportedServerError):
        core.check_server("6.0.16", "noeviction")
    assert core.check_server("6.2.0", "noeviction") == []
    assert core.check_server("7.2.4", None) == []


def test_an_evicting_server_is_refused_by_default(server_factory: ServerFactory) -> None:
    server = server_factory(extra_args=["--maxmemory-policy", "allkeys-lru"])
    with Queue("q", url=server.url) as q, pytest.raises(EvictionPolicyError):
        q.enqueue("t", None)
    assert redis.Redis.from_url(server.url).dbsize() == 0


def test_an_evicting_server_can_be_only_warned_about(
    server_factory: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    server = server_factory(extra_args=["--maxmemory-policy", "allkeys-lru"])
    settings = QueueSettings(eviction_check="warn")
    with caplog.at_level(logging.WARNING), Queue("q", url=server.url, settings=settings) as q:
        q.enqueue("t", None)
    assert "maxmemory-policy is 'allkeys-lru'" in caplog.text


def test_the_protocol_version_is_written_and_checked(
    redis_client: redis.Redis, redis_url: str, queue_name: str
) -> None:
    with Queue(queue_name, url=redis_url) as q:
        q.enqueue("t", None)
        assert redis_client.hget(q.core.keys.meta, "version") == b"4"
        redis_client.hset(q.core.keys.meta, "version", "99")
    with Queue(queue_name, url=redis_url) as q, pytest.raises(ProtocolVersionError):
        q.enqueue("t", None)


def test_unreachable_redis_fails_fast_with_a_typed_error(server_factory: ServerFactory) -> None:
    server = server_factory()
    url = server.url
    server.stop()
    started = time.monotonic()
    with Queue("q", url=url) as q, pytest.raises(ConnectionLostError):
        q.enqueue("t", None)
    assert time.monotonic() - started < 5


def test_wrong_password_is_a_configuration_error(server_factory: ServerFactory) -> None:
    server = server_factory(extra_args=["--requirepass", "s3cret"])
    bad = server.url.replace("redis://", "redis://:wrong@")
    with Queue("q", url=bad) as q, pytest.raises(ConfigurationError) as raised:
        q.enqueue("t", None)
    assert "wrong" not in str(raised.value)


def test_no_url_anywhere_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONVEYOR_REDIS_URL", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    with pytest.raises(ConfigurationError):
        Queue("q")

"""Fixtures of the protocol suite: each test drives the Lua scripts directly,
through `SyncRunner` on a raw `redis.Redis`, on a queue no other test uses."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from .harness import Proto


@pytest.fixture
def q(redis_client: redis.Redis) -> Iterator[Proto]:
    """A fresh queue (unique name, prefix `cvtest`) of the session server."""
    yield Proto(redis_client, "p-" + uuid.uuid4().hex[:16])

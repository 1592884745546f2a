"""heartbeat.lua: lease renewal with token fencing, and the workers roll call."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from conveyor.errors import OutOfMemoryError

from .harness import Proto


def test_heartbeat_moves_held_lease_deadlines(q: Proto) -> None:
    q.enqueue("a")
    q.enqueue("b")
    q.claim(2, token="t", lease_ms=1_000)
    raw = q.heartbeat_raw([("a", "t"), ("b", "t")], lease_ms=60_000)
    now = int(raw[0])
    assert raw[1:] == []
    assert q.score(q.keys.active, "a") == now + 60_000
    assert q.score(q.keys.active, "b") == now + 60_000
    assert q.job("a")["state"] == "active"


def test_a_wrong_token_is_reported_lost_and_its_lease_is_not_moved(q: Proto) -> None:
    q.start("a", token="right", lease_ms=5_000)
    deadline = q.score(q.keys.active, "a")
    assert q.heartbeat([("a", "wrong")], lease_ms=60_000) == ["a"]
    assert q.score(q.keys.active, "a") == deadline
    assert q.job("a")["token"] == "right"


def test_jobs_no_longer_active_are_lost(q: Proto) -> None:
    q.start("done", token="t")
    q.complete_one("done", "t")
    q.enqueue("held", priority=0)
    q.claim(token="t")
    lost = q.heartbeat([("done", "t"), ("held", "t"), ("never", "t")])
    assert lost == ["done", "never"]
    assert q.score(q.keys.active, "done") is None  # not put back into `active`
    assert q.score(q.keys.active, "never") is None


def test_heartbeat_never_adds_a_lease_that_left_the_index(q: Proto) -> None:
    q.start("a", token="t")
    q.r.zrem(q.keys.active, "a")
    assert q.heartbeat([("a", "t")]) == []
    assert q.score(q.keys.active, "a") is None


def test_a_late_beat_renews_an_expired_lease_that_was_not_reaped(q: Proto) -> None:
    q.start("a", token="t", lease_ms=20)
    time.sleep(0.03)
    raw = q.heartbeat_raw([("a", "t")], lease_ms=10_000)
    assert q.score(q.keys.active, "a") == int(raw[0]) + 10_000
    assert q.reap().recovered == 0


def test_the_worker_is_announced_for_its_ttl(q: Proto) -> None:
    raw = q.heartbeat_raw([], worker="w-1", worker_ttl_ms=7_000, info='{"pid": 42}')
    now = int(raw[0])
    assert q.score(q.keys.workers, "w-1") == now + 7_000
    assert q.r.get(q.keys.worker("w-1")) == b'{"pid": 42}'
    assert 6_000 < q.ttl_ms(q.keys.worker("w-1")) <= 7_000
    raw = q.heartbeat_raw([], worker="w-1", worker_ttl_ms=9_000, info='{"pid": 43}')
    assert q.score(q.keys.workers, "w-1") == int(raw[0]) + 9_000
    assert q.r.get(q.keys.worker("w-1")) == b'{"pid": 43}'


def test_expired_roll_call_entries_are_dropped_ten_at_a_time(q: Proto) -> None:
    q.r.zadd(q.keys.workers, {f"dead-{i:02}": i for i in range(12)})
    q.heartbeat([], worker="alive")
    assert q.members(q.keys.workers) == ["dead-10", "dead-11", "alive"]
    q.heartbeat([], worker="alive")
    assert q.members(q.keys.workers) == ["alive"]


def test_heartbeat_writes_no_events_and_touches_no_job_fields(q: Proto) -> None:
    q.start("a", token="t")
    job, events = q.job("a"), q.events()
    q.heartbeat([("a", "t")])
    assert q.job("a") == job
    assert q.events() == events


def test_leases_are_renewed_even_when_redis_is_out_of_memory(server_factory: Any) -> None:
    server = server_factory(extra_args=["--maxmemory-policy", "noeviction"])
    client = redis.Redis.from_url(server.url)
    q = Proto(client, "oom")
    q.start("a", token="t", lease_ms=1_000)
    q.heartbeat([("a", "t")])  # the first beat creates the roll-call entry
    client.set("filler", "x" * 4_000_000)
    client.config_set("maxmemory", 1_000_000)  # now well over the limit
    with pytest.raises(OutOfMemoryError):
        q.enqueue("b")  # growing writes are refused...
    raw = q.heartbeat_raw([("a", "t")], lease_ms=60_000)
    assert raw[1:] == []  # ...but renewing the lease is not
    assert q.score(q.keys.active, "a") == int(raw[0]) + 60_000
    client.close()

"""Sliding-window rate limits (include/rate.lua in claim.lua, protocol §3.2)
and rate_limited.lua (an external limit a handler signalled, §16.4)."""

from __future__ import annotations

import time

from conveyor.protocol import ops

from .harness import MAXLEN, Proto


def _limits(q: Proto, what: str, **kwargs: object) -> None:
    assert q.run(ops.limits(q.keys, what, **kwargs)) == 1  # type: ignore[arg-type]


def _rate_limited(q: Proto, *leases: tuple[str, str], wait_ms: int, scope: str) -> list[int]:
    call = ops.rate_limited(q.keys, leases, wait_ms=wait_ms, scope=scope, events_maxlen=MAXLEN)
    return [int(x) for x in q.run(call)]


def test_a_fixed_window_boundary_frees_nothing(q: Proto) -> None:
    _limits(q, "queue", rate=3, window_ms=1_000)
    for i in range(6):
        q.enqueue(f"j{i}")
    while q.now() % 1_000 > 500:  # lease in the first half of a fixed second
        time.sleep(0.01)
    first = q.claim(6)
    assert len(first.jobs) == 3
    boundary = (first.now_ms // 1_000 + 1) * 1_000
    time.sleep(max(0.0, (boundary - q.now()) / 1000) + 0.02)
    after = q.claim(6)  # a fixed window would have reset here
    if after.now_ms < first.now_ms + 1_000:
        assert after.jobs == [] and after.next_due_ms == first.now_ms + 1_000
    assert q.r.zcard(q.keys.base + "rate") == 3  # the log: one member per lease


def test_no_window_of_the_stated_length_holds_more_than_the_rate(q: Proto) -> None:
    _limits(q, "queue", rate=4, window_ms=150)
    for i in range(40):
        q.enqueue(f"j{i}")
    leases: list[int] = []
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        reply = q.claim(3)
        leases += [reply.now_ms] * len(reply.jobs)
        time.sleep(0.003)
    assert len(leases) >= 8  # the limit let jobs through, across several windows
    for start in leases:
        assert sum(start <= t < start + 150 for t in leases) <= 4


def test_a_group_rate_slides_too(q: Proto) -> None:
    _limits(q, "group", group="g", rate=2, window_ms=300)
    for i in range(4):
        q.enqueue(f"g{i}", group="g")
    first = q.claim(4)
    assert [j.id for j in first.jobs] == ["g0", "g1"]
    again = q.claim(4)
    assert again.jobs == []
    assert q.score(q.keys.gwait, "g") == first.now_ms + 300
    time.sleep(max(0.0, (first.now_ms + 300 - q.now()) / 1000) + 0.02)
    assert q.claimed_ids(4) == ["g2", "g3"]


def test_an_external_limit_gives_the_job_back_and_holds_the_queue(q: Proto) -> None:
    q.enqueue("a")
    q.enqueue("b")
    score = q.ready_score("a")
    assert q.claimed_ids(token="t") == ["a"]
    assert _rate_limited(q, ("a", "t"), wait_ms=300, scope="queue") == [1]
    job = q.job("a")
    assert (job["state"], job["failures"], job["stalls"], job["attempts"]) == (
        "waiting", "0", "0", "1",
    )  # fmt: skip
    assert q.score(q.keys.ready, "a") == score  # its old place
    held_until = int(q.r.hget(q.keys.meta, "held_until") or 0)
    reply = q.claim(2)
    assert reply.jobs == [] and reply.next_due_ms == held_until
    (event,) = q.events("rate_limited")
    assert (event["id"], event["wait_ms"], event["scope"]) == ("a", "300", "queue")
    time.sleep(max(0.0, (held_until - q.now()) / 1000) + 0.02)
    assert q.claimed_ids(2) == ["a", "b"]
    assert _rate_limited(q, ("a", "stale"), wait_ms=300, scope="queue") == [0]


def test_an_external_limit_of_a_group_holds_only_that_group(q: Proto) -> None:
    q.enqueue("g1", group="g")
    q.enqueue("g2", group="g")
    q.enqueue("h1", group="h")
    assert q.claimed_ids(token="t") == ["g1"]
    assert _rate_limited(q, ("g1", "t"), wait_ms=60_000, scope="group") == [1]
    assert q.score(q.keys.gwait, "g") is not None
    assert q.claimed_ids(3) == ["h1"]
    assert q.claimed_ids(3) == []
    assert q.members(q.keys.group_ready("g")) == ["g1", "g2"]

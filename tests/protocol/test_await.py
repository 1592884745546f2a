"""await.lua and the done:<id> list: waiting for an outcome without polling."""

from __future__ import annotations

import threading
import time

import redis

from conveyor.protocol import ops

from .harness import Proto


def blmove(q: Proto, job_id: str, timeout: float) -> bytes | None:
    done = q.keys.done(job_id)
    return q.r.blmove(done, done, timeout, "RIGHT", "LEFT")  # type: ignore[arg-type]


def test_a_missing_job(q: Proto) -> None:
    assert q.run(ops.await_job(q.keys, "nope")) == [b"missing"]
    assert q.await_job("nope") == ops.AwaitReply("missing", None)
    assert q.r.exists(q.keys.job("nope")) == 0


def test_a_pending_job_counts_its_waiters(q: Proto) -> None:
    q.enqueue("a")
    assert q.run(ops.await_job(q.keys, "a")) == [b"pending"]
    assert q.job("a")["waiters"] == "1"
    assert q.await_job("a").state == "pending"
    assert q.job("a")["waiters"] == "2"
    q.enqueue("d", delay=30)
    q.start("r", priority=0)
    assert (q.await_job("d").state, q.await_job("r").state) == ("pending", "pending")


def test_a_finished_job_answers_at_once(q: Proto) -> None:
    q.start("ok", token="t")
    q.complete_one("ok", "t", '{"r":1}')
    q.start("bad", token="t")
    q.fail("bad", "t", "Boom: x", permanent=True)
    assert q.run(ops.await_job(q.keys, "ok")) == [b"completed", b'{"r":1}']
    assert q.await_job("bad") == ops.AwaitReply("failed", "Boom: x")
    assert "waiters" not in q.job("ok") and "waiters" not in q.job("bad")


def test_a_completed_record_without_result_reads_as_null(q: Proto) -> None:
    q.r.hset(q.keys.job("x"), "state", "completed")
    q.r.hset(q.keys.job("y"), "state", "failed")
    assert q.await_job("x") == ops.AwaitReply("completed", "null")
    assert q.await_job("y") == ops.AwaitReply("failed", "")


def test_every_blocked_waiter_sees_the_outcome(q: Proto, redis_url: str) -> None:
    q.start("a", token="t")
    assert q.await_job("a").state == "pending"
    assert q.await_job("a").state == "pending"
    assert blmove(q, "a", 0.02) is None  # nothing yet
    got: list[bytes | None] = []

    def wait() -> None:
        client = redis.Redis.from_url(redis_url)
        try:
            done = q.keys.done("a")
            got.append(client.blmove(done, done, 5, "RIGHT", "LEFT"))
        finally:
            client.close()

    waiters = [threading.Thread(target=wait) for _ in range(2)]
    for thread in waiters:
        thread.start()
    time.sleep(0.05)  # both are blocked on done:a
    q.complete_one("a", "t", '"r"')
    for thread in waiters:
        thread.join(5)
    assert got == [b'completed\n"r"', b'completed\n"r"']
    assert q.r.lrange(q.keys.done("a"), 0, -1) == [b'completed\n"r"']  # still there
    assert ops.decode_done(got[0]) == ops.AwaitReply("completed", '"r"')


def test_a_late_waiter_reads_the_kept_element(q: Proto) -> None:
    q.start("a", token="t", result_ttl=0)
    q.await_job("a")
    q.fail("a", "t", "E: x\nline 2", permanent=True)
    element = blmove(q, "a", 0.05)
    assert ops.decode_done(element) == ops.AwaitReply("failed", "E: x\nline 2")


def test_a_new_run_never_sees_the_notification_of_an_old_one(q: Proto) -> None:
    q.start("a", token="t", result_ttl=0)
    q.await_job("a")
    q.complete_one("a", "t", '"old"')  # record gone, done:a kept 60 s
    q.enqueue("a")
    assert q.await_job("a").state == "pending"
    assert blmove(q, "a", 0.02) is None
    q.claim(token="t2")
    q.complete_one("a", "t2", '"new"')
    assert ops.decode_done(blmove(q, "a", 0.05)) == ops.AwaitReply("completed", '"new"')


def test_a_released_twin_run_never_sees_the_ended_run_notification(q: Proto) -> None:
    q.start("s", token="t")
    q.await_job("s")
    q.enqueue("s", data=2)
    q.complete_one("s", "t", '"first"')
    assert q.await_job("s").state == "pending"  # the twin's run
    assert blmove(q, "s", 0.02) is None

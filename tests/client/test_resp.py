"""The packed-ahead single enqueue: its bytes, and its ids."""

from __future__ import annotations

import os
import sys
from typing import Any

import hiredis
import pytest

from conveyor import JobState
from conveyor.client.resp import pack_head, pack_tail
from conveyor.options import new_job_id


@pytest.mark.parametrize(
    "head, tail",
    [
        (("EVALSHA", "a" * 40, 5, "k:{q}:", "k:{q}:meta", 10_000), ("id", "task", '{"x": 1}')),
        (("EVALSHA", "b" * 40, 1, "k:{q}:", 0), ("", "tâsk", "daté ☃ \r\n")),
        (("PING",), ()),
    ],
)
def test_head_and_tail_are_what_hiredis_packs(
    head: tuple[str | int, ...], tail: tuple[str, ...]
) -> None:
    packed = pack_head(head, tail=len(tail)) + pack_tail(tail)
    assert packed == hiredis.pack_command((*head, *tail))


def test_enqueue_sends_the_packed_call_and_redis_runs_it(queue: Any) -> None:
    done = [queue.enqueue("t", {"n": n, "text": "ünïcode"}) for n in range(3)]
    assert [queue.get(e.id).data for e in done] == [{"n": n, "text": "ünïcode"} for n in range(3)]
    assert queue.job_ids("waiting") == [e.id for e in done]


def test_ids_are_unique_and_sixteen_characters() -> None:
    ids = [new_job_id() for _ in range(5_000)]
    assert len(set(ids)) == len(ids)
    assert {len(i) for i in ids} == {16}


@pytest.mark.skipif(sys.platform == "win32", reason="no fork")
def test_a_forked_child_does_not_reuse_its_parents_ids() -> None:
    new_job_id()  # the parent holds spare ids now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        os.close(read)
        os.write(write, "".join(new_job_id() for _ in range(8)).encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 4096).decode()
    os.close(read)
    os.waitpid(pid, 0)
    parent = [new_job_id() for _ in range(200)]
    child_ids = {child[k : k + 16] for k in range(0, len(child), 16)}
    assert len(child_ids) == 8
    assert not child_ids & set(parent)


def test_a_packed_enqueue_refused_noscript_loads_the_script_and_creates_one_job(
    queue: Any, redis_client: Any
) -> None:
    first = queue.enqueue("t", 1)
    redis_client.script_flush()
    second = queue.enqueue("t", 2)
    assert (second.outcome, queue.get(second.id).data) == ("created", 2)
    assert queue.job_ids("waiting") == [first.id, second.id]
    assert queue.counts()[JobState.WAITING] == 2

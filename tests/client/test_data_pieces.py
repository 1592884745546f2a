"""Data stored in pieces (protocol §4.1) reads back whole through `Queue.get`."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from conveyor import Queue
from conveyor.job import job_from_hash

# the euro sign crosses byte 64 of the JSON text; the long one crosses many piece ends
SHORT = "a" * 61 + "€" + "b" * 34
LONG = "".join("x" * (k % 7) + "é€😀"[k % 3] for k in range(502))
PAYLOADS = [SHORT, {"text": LONG, "n": [1, 2, 3]}, "é" * 2500]


@pytest.mark.parametrize("data", PAYLOADS, ids=["100-bytes", "3000-bytes", "5000-bytes"])
def test_get_returns_the_whole_data(queue: Any, redis_client: redis.Redis, data: Any) -> None:
    done = queue.enqueue("t", data, id="j1")
    fields = redis_client.hkeys(queue.core.keys.job("j1"))
    assert (b"data2" in fields) == (data != PAYLOADS[2])  # stored in pieces up to 4096 bytes
    assert queue.get(done.id).data == data


def test_a_record_read_with_decoded_replies_joins_its_pieces(
    sync_queue: Queue, redis_url: str
) -> None:
    sync_queue.enqueue("t", LONG, id="j1")
    with redis.Redis.from_url(redis_url, decode_responses=True) as text_client:
        raw = text_client.hgetall(sync_queue.core.keys.job("j1"))  # each piece decodes alone
    assert len([name for name in raw if name.startswith("data")]) > 40
    assert job_from_hash(sync_queue.name, "j1", raw).data == LONG

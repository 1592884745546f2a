"""Data pieces (protocol §4.1): a job's data of 65 to 4096 bytes is stored in pieces of at most
64 bytes (`data`, `data2`, ...), ending on UTF-8 character boundaries, so that the record stays
a listpack; every script that reads the data assembles it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conveyor.protocol.keys import FAILURE_LANE, QueueKeys
from conveyor.protocol.record import DATA_PIECE_NAMES

from .harness import PREFIX, Proto

# "a" * 61 after the opening quote puts the euro sign (3 bytes) across byte 64
SHORT = "a" * 61 + "€" + "b" * 34  # 100 bytes of JSON text
# 2- to 4-byte characters between ASCII runs of odd lengths: pieces end early many times
LONG = "".join("x" * (k % 7) + "é€😀"[k % 3] for k in range(502))


def encoded(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def expected_pieces(data: bytes) -> list[bytes]:
    """The rule of §4.1, written out independently of the Lua."""
    if len(data) <= 64 or len(data) > 4096:
        return [data]
    pieces, start = [], 0
    while start < len(data):
        stop = min(start + 64, len(data))
        if stop < len(data):
            cut = stop
            while cut >= stop - 3 and 0x80 <= data[cut] < 0xC0:
                cut -= 1
            if cut >= stop - 3:
                stop = cut
        pieces.append(data[start:stop])
        start = stop
    return pieces if len(pieces) <= 64 else [data]


def pieces_of(q: Proto, key: str) -> list[bytes]:
    """The data fields a record holds, in order; fails on a gap or a stray piece."""
    raw = q.r.hgetall(key)
    names = sorted((k for k in raw if k.startswith(b"data")), key=lambda k: int(k[4:] or 1))
    assert names == [DATA_PIECE_NAMES[i].encode() for i in range(len(names))]
    return [raw[name] for name in names]


def test_the_test_payloads_cross_a_piece_boundary_inside_a_character() -> None:
    short, long = encoded(SHORT), encoded(LONG)
    assert len(short) == 100 and short[64] == 0xAC  # byte 65 continues the euro sign
    assert 3000 <= len(long) <= 4096
    assert len(expected_pieces(short)) == 2 and len(expected_pieces(short)[0]) == 62
    assert any(len(p) < 64 for p in expected_pieces(long)[:-1])


@pytest.mark.parametrize("value", [SHORT, LONG], ids=["100-bytes", "3000-bytes"])
def test_long_data_is_stored_in_pieces_and_claimed_whole(q: Proto, value: str) -> None:
    q.enqueue("a", "t", value)
    pieces = pieces_of(q, q.keys.job("a"))
    assert pieces == expected_pieces(encoded(value))
    assert len(pieces) > 1 and all(len(p) <= 64 for p in pieces)
    for piece in pieces:
        piece.decode("utf-8")  # each piece alone is valid text
    (job,) = q.claim().jobs
    assert json.loads(job.data) == value


def test_a_record_with_a_100_byte_payload_stays_a_listpack(q: Proto) -> None:
    config = q.r.config_get("hash-max-*-value")
    assert set(config.values()) == {"64"}, "the session server must run Redis's default"
    q.enqueue("a", "t", SHORT)
    assert q.r.object("encoding", q.keys.job("a")) in (b"listpack", b"ziplist")


def test_data_of_at_most_64_bytes_or_over_4096_bytes_is_stored_whole(q: Proto) -> None:
    q.enqueue("small", "t", "a" * 62)  # 64 bytes with its quotes
    q.enqueue("big", "t", "é" * 2500)  # 5002 bytes
    assert pieces_of(q, q.keys.job("small")) == [encoded("a" * 62)]
    assert pieces_of(q, q.keys.job("big")) == [encoded("é" * 2500)]
    assert {json.loads(job.data) for job in q.claim(2).jobs} == {"a" * 62, "é" * 2500}


@pytest.mark.parametrize(
    ("value", "count"),
    [("x" * 4094, 64), ("x" * 4095, 1), ("€" * 1364, 1), ("€" * 1300, 62)],
    ids=["4096-bytes", "4097-bytes", "65-pieces-needed", "62-short-pieces"],
)
def test_at_most_64_pieces_of_at_most_4096_bytes(q: Proto, value: str, count: int) -> None:
    q.enqueue("a", "t", value)
    pieces = pieces_of(q, q.keys.job("a"))
    assert pieces == expected_pieces(encoded(value)) and len(pieces) == count
    q.enqueue("a", "t", 1)  # a record with all 64 pieces, replaced
    assert pieces_of(q, q.keys.job("a")) == [b"1"]
    q.enqueue("a", "t", value)
    (job,) = q.claim().jobs
    assert json.loads(job.data) == value


def test_an_upsert_to_shorter_data_leaves_no_stale_piece(q: Proto) -> None:
    q.enqueue("a", "t", LONG)
    q.enqueue("a", "t", SHORT)
    assert pieces_of(q, q.keys.job("a")) == expected_pieces(encoded(SHORT))
    q.enqueue("a", "t", 7)
    assert pieces_of(q, q.keys.job("a")) == [b"7"]
    q.enqueue("a", "t", LONG)
    (job,) = q.claim().jobs
    assert json.loads(job.data) == LONG


def test_a_blocked_twin_is_stored_in_pieces_and_becomes_the_job_whole(q: Proto) -> None:
    q.enqueue("s", "t", 1)
    q.claim()
    q.enqueue("s", "t", LONG)  # the job runs: a blocked twin
    assert pieces_of(q, q.keys.blocked_job("s")) == expected_pieces(encoded(LONG))
    q.complete_one("s")  # the run ends for good: the twin is renamed into the job
    (job,) = q.claim(token="tok2").jobs
    assert json.loads(job.data) == LONG


@pytest.mark.parametrize(("run", "twin"), [(1, LONG), (LONG, SHORT), (SHORT, 2)])
def test_a_twin_merged_into_a_retried_run_keeps_its_whole_data(
    q: Proto, run: Any, twin: Any
) -> None:
    q.enqueue("s", "t", run)
    q.claim()
    q.enqueue("s", "t", twin)
    assert q.fail("s", retry_delay_ms=0) == "retried"
    assert pieces_of(q, q.keys.job("s")) == expected_pieces(encoded(twin))
    (job,) = q.claim(token="tok2").jobs
    assert json.loads(job.data) == twin


def test_the_failure_lane_job_gets_the_whole_data(q: Proto) -> None:
    q.r.sadd(q.keys.failure_tasks, "t")
    q.enqueue("a", "t", LONG)
    q.claim()
    assert q.fail("a", permanent=True) == "failed"
    lane = Proto(q.r, q.name)
    lane.keys = QueueKeys(PREFIX, q.name, FAILURE_LANE)
    lane.runner = q.runner
    (job,) = lane.claim().jobs
    assert json.loads(job.data)["data"] == LONG
    assert all(len(p) <= 64 for p in pieces_of(lane, lane.keys.job(job.id)))


def test_a_schedule_keeps_its_template_whole_and_its_tick_job_in_pieces(q: Proto) -> None:
    job_id, _ = q.schedule("s", q.now() - 1, every_ms=60_000, data=SHORT)
    assert q.schedule_hash("s")["data"] == encoded(SHORT).decode()
    assert pieces_of(q, q.keys.job(job_id)) == expected_pieces(encoded(SHORT))
    (job,) = q.claim().jobs
    assert json.loads(job.data) == SHORT

"""The events source's columnar expansion of entries (spark/events.py `_batch`) gives the
rows the client's decoder (`decode_entries`, one Event per job) gives: the two read the
same entries of protocol §11, and the source keeps its own, faster, expansion."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark", reason="PySpark is not installed: pip install -e '.[spark]'")

from conveyor.client.events import decode_entries  # noqa: E402
from conveyor.integrations.spark.events import _batch  # noqa: E402
from conveyor.integrations.spark.schema import EVENTS_COLUMNS, arrow_schema, struct  # noqa: E402

pytestmark = pytest.mark.spark

ENTRIES: list[tuple[bytes, dict[bytes, bytes]]] = [
    # one job per entry (`id`), as every script but four writes
    (b"1795976142681-0", {b"event": b"created", b"id": b"a", b"state": b"waiting"}),
    (b"1795976142681-1", {b"event": b"progress", b"id": b"a", b"progress": b"0.5"}),
    # a claim: its jobs and their attempts, and the worker
    (
        b"1795976142682-0",
        {b"event": b"active", b"ids": b"a b c", b"attempts": b"1 2 1", b"worker": b"w1"},
    ),
    # a complete: ids alone
    (b"1795976142683-0", {b"event": b"completed", b"ids": b"a b"}),
    # attempts that do not pair up with the ids are left out, not guessed
    (b"1795976142683-5", {b"event": b"active", b"ids": b"d e", b"attempts": b"1"}),
    (
        b"1795976142684-0",
        {
            b"event": b"retried",
            b"id": b"c",
            b"delay_ms": b"1500",
            b"error": b"boom",
            b"stalls": b"1",
        },
    ),
]


def _rows_of_batch() -> list[dict[str, Any]]:
    schema = arrow_schema(struct(EVENTS_COLUMNS))
    flat = [(sid, [x for pair in fields.items() for x in pair]) for sid, fields in ENTRIES]
    rows: list[dict[str, Any]] = _batch(flat, schema, "q").to_pylist()
    return rows


def test_the_source_expands_entries_into_the_rows_the_client_decodes() -> None:
    rows = _rows_of_batch()
    events = decode_entries(ENTRIES)
    assert len(rows) == len(events) == 10
    for row, event in zip(rows, events, strict=True):
        assert row["stream_id"] == event.stream_id
        assert row["queue"] == "q"
        assert row["event"] == event.name
        assert row["job_id"] == event.job_id
        assert row["at"].timestamp() * 1000 == int(event.stream_id.split("-")[0])
        expected = {
            "state": event.fields.get("state"),
            "attempt": event.fields.get("attempt"),
            "worker": event.fields.get("worker"),
            "error": event.fields.get("error"),
            "progress": event.fields.get("progress"),
            "delay_ms": event.fields.get("delay_ms"),
            "stalls": event.fields.get("stalls"),
        }
        got = {k: None if row[k] is None else str(row[k]) for k in expected}
        if got["progress"] is not None:
            got["progress"] = str(float(got["progress"]))
            expected["progress"] = str(float(expected["progress"] or 0))
        assert got == expected, (row, event)
    assert [(r["job_id"], r["attempt"]) for r in rows if r["event"] == "active"] == [
        ("a", 1), ("b", 2), ("c", 1), ("d", None), ("e", None)]  # fmt: skip

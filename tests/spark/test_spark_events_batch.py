"""The events source's columnar expansion of entries (spark/events.py `_batch`) gives the
rows the client's decoder (`decode_entries`, one Event per job) gives: the two read the
same entries of protocol §11, and the source keeps its own, faster, expansion. Its
`rows=entries` mode (`_entry_batch`) gives a row per entry that, weighted by `jobs`, counts
the same."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark", reason="PySpark is not installed: pip install -e '.[spark]'")

from conveyor.client.events import decode_entries  # noqa: E402
from conveyor.integrations.spark.events import _batch, _entry_batch  # noqa: E402
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
    # a claim of one job
    (b"1795976142683-7", {b"event": b"active", b"ids": b"f", b"attempts": b"3", b"worker": b"w2"}),
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


def _rows(expand: Any = _batch) -> list[dict[str, Any]]:
    schema = arrow_schema(struct(EVENTS_COLUMNS))
    flat = [(sid, [x for pair in fields.items() for x in pair]) for sid, fields in ENTRIES]
    rows: list[dict[str, Any]] = expand(flat, schema, "q").to_pylist()
    return rows


# Each column's type in the rows, for the decoder's text.
_TYPED = {"state": str, "attempt": int, "worker": str, "error": str, "progress": float,
          "delay_ms": int, "stalls": int}  # fmt: skip


def test_the_source_expands_entries_into_the_rows_the_client_decodes() -> None:
    rows = _rows()
    events = decode_entries(ENTRIES)
    assert len(rows) == len(events) == 11
    for row, event in zip(rows, events, strict=True):
        assert row["stream_id"] == event.stream_id
        assert row["queue"] == "q"
        assert row["event"] == event.name
        assert row["job_id"] == event.job_id
        assert row["jobs"] == 1
        assert row["at"].timestamp() * 1000 == int(event.stream_id.split("-")[0])
        expected = {
            k: None if event.fields.get(k) is None else kind(event.fields[k])
            for k, kind in _TYPED.items()
        }
        assert {k: row[k] for k in _TYPED} == expected, (row, event)
    assert [(r["job_id"], r["attempt"]) for r in rows if r["event"] == "active"] == [
        ("a", 1), ("b", 2), ("c", 1), ("d", None), ("e", None), ("f", 3)]  # fmt: skip


def test_a_row_per_entry_weighted_by_its_jobs_counts_what_the_job_rows_count() -> None:
    per_job, per_entry = _rows(), _rows(_entry_batch)
    assert [r["stream_id"] for r in per_entry] == [sid.decode() for sid, _ in ENTRIES]
    assert [r["jobs"] for r in per_entry] == [1, 1, 3, 2, 2, 1, 1]

    def shared(row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(v for k, v in sorted(row.items()) if k not in ("job_id", "attempt", "jobs"))

    counted: dict[tuple[Any, ...], int] = {}
    for row in per_job:
        counted[shared(row)] = counted.get(shared(row), 0) + 1
    weighed: dict[tuple[Any, ...], int] = {}
    for row in per_entry:
        weighed[shared(row)] = weighed.get(shared(row), 0) + row["jobs"]
    assert weighed == counted

    # an entry of one job is the row the job rows give; of several, no one job's id
    by_stream = {r["stream_id"]: r for r in per_job}
    for row in per_entry:
        if row["jobs"] == 1:
            assert row == by_stream[row["stream_id"]]
        else:
            assert (row["job_id"], row["attempt"]) == (None, None)

"""Pieces that need no SparkSession: Java check, options, row encoding, charts, imports."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import replace
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="PySpark is not installed: pip install -e '.[spark]'")

import hiredis  # noqa: E402
import pyarrow as pa  # noqa: E402

from conveyor import serializers  # noqa: E402
from conveyor.client.core import QueueCore
from conveyor.client.models import QueueSettings  # noqa: E402
from conveyor.errors import (  # noqa: E402
    NotSerializableError,
    PayloadTooLargeError,
    UnknownOptionError,
    ValidationError,
)
from conveyor.integrations.spark import charts, session  # noqa: E402
from conveyor.integrations.spark.encode import Chunk, RowEncoder  # noqa: E402
from conveyor.integrations.spark.options import Options, parse_instant_ms  # noqa: E402
from conveyor.integrations.spark.payload import json_objects  # noqa: E402
from conveyor.integrations.spark.send import EnqueueSender  # noqa: E402
from conveyor.protocol import ops  # noqa: E402
from conveyor.protocol.ops import ENQUEUE_ARITY  # noqa: E402

pytestmark = pytest.mark.spark


def test_missing_java_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(session.SparkSetupError, match="needs Java 17 or newer"):
        session.check_java()


def test_old_java_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text("#!/bin/sh\necho 'openjdk version \"11.0.2\" 2019-01-15' >&2\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(session.SparkSetupError, match="11.0.2"):
        session.check_java()


@pytest.mark.parametrize(
    ("text", "major"),
    [('openjdk version "17.0.15" 2025-04-15', 17), ('java version "1.8.0_402"', 8),
     ('openjdk version "21" 2023-09-19', 21), ("garbage", None)],
)  # fmt: skip
def test_java_versions_are_parsed(text: str, major: int | None) -> None:
    assert session.java_major(text) == major


def test_options_are_typed_and_unknown_ones_refused() -> None:
    options = Options({"Queue": "q", "chunkSize": "10", "atomic": "TRUE", "x": "1"}, source="c")
    assert options.text("queue") == "q"
    assert options.integer("chunksize", 5) == 10 and options.flag("atomic", False)
    with pytest.raises(UnknownOptionError, match=r"\['x'\]"):
        options.finish()
    assert parse_instant_ms("1700000000.5") == 1_700_000_000_500
    assert parse_instant_ms("2023-11-14T22:13:20") == 1_700_000_000_000


def _encoder(**kw: Any) -> RowEncoder:
    core = QueueCore("q", QueueSettings(max_payload=200))
    args = {"default_task": "t", "id_prefix": "w-3", "request": "spark-w", "validate_data": True}
    return RowEncoder(core, **{**args, **kw})


def _jobs(chunk: Chunk) -> list[list[bytes]]:
    """The script arguments of each job of a chunk, parsed back from its RESP."""
    reader = hiredis.Reader()
    reader.feed(b"*%d\r\n" % (chunk.count * ENQUEUE_ARITY) + bytes(chunk.body()))
    flat = reader.gets()
    return [flat[i : i + ENQUEUE_ARITY] for i in range(0, len(flat), ENQUEUE_ARITY)]


def test_rows_are_encoded_with_conveyor_validation() -> None:
    batch = pa.RecordBatch.from_pydict(
        {"customer": [1, 2], "when": pa.array([0, 1_000_000], pa.timestamp("us", tz="UTC")),
         "priority": [5, None]}
    )  # fmt: skip
    jobs = _jobs(_encoder().encode(batch, first_row=10))
    core = QueueCore("q", QueueSettings(max_payload=200))
    expected = [  # null priority -> the queue's default; the write's request id
        core.spec("t", {"customer": 1, "when": "1970-01-01T00:00:00.000000Z"},
                  {"id": "w-3-10", "priority": 5}),
        core.spec("t", {"customer": 2, "when": "1970-01-01T00:00:01.000000Z"}, {"id": "w-3-11"}),
    ]  # fmt: skip
    argv = [[str(a).encode() for a in replace(s, request="spark-w").argv()] for s in expected]
    assert jobs == argv
    with pytest.raises(ValidationError, match="priority"):
        _encoder().encode(pa.RecordBatch.from_pydict({"n": [1], "priority": [-1]}), first_row=0)
    with pytest.raises(PayloadTooLargeError, match="row 0"):
        _encoder().encode(pa.RecordBatch.from_pydict({"text": ["x" * 300]}), first_row=0)
    with pytest.raises(ValidationError, match="not JSON"):
        _encoder().encode(pa.RecordBatch.from_pydict({"data": ["{oops"]}), first_row=0)
    with pytest.raises(ValidationError, match="job id"):
        _encoder().encode(pa.RecordBatch.from_pydict({"id": ["ok", "has space"], "n": [1, 2]}), 0)
    with pytest.raises(ValidationError, match="null"):
        _encoder().encode(pa.RecordBatch.from_pydict({"id": ["ok", None], "n": [1, 2]}), 0)
    with pytest.raises(NotSerializableError):
        _encoder().encode(pa.RecordBatch.from_pydict({"x": [1.0, float("nan")]}), 0)


def test_encoding_sends_the_bytes_of_queue_enqueue() -> None:
    """The column-wise encoding is byte for byte the wire's packing of `ops.enqueue` for the
    same jobs built by `QueueCore.spec` (what `Queue.enqueue_many` sends)."""
    core = QueueCore("q", QueueSettings())
    rows = {
        "id": ["a", "b:{x}", "c"],
        "task": ["t1", "t2", "t1"],
        "n": [1, None, -7],
        "price": [10.5, 3.0, None],
        "name": ['q"uote', "b\\s", "ünï 😀"],
        "ctl": ["tab\there", "", None],  # a control character: the per-row JSON path
        "priority": pa.array([0, None, 2000], pa.int32()),
        "delay": [None, 60.0, None],
        "group": [None, "g1", "g1"],
        "max_failures": [None, None, 7],
    }
    batch = pa.RecordBatch.from_pydict(rows)
    chunk = RowEncoder(
        core, default_task=None, id_prefix="w", request="spark-w", validate_data=True
    ).encode(batch, first_row=0)
    specs = []
    for row in batch.to_pylist():
        options = {k: row[k] for k in ("id", "priority", "delay", "group", "max_failures")}
        data = {k: row[k] for k in ("n", "price", "name", "ctl")}
        spec = core.spec(row["task"], data, {k: v for k, v in options.items() if v is not None})
        specs.append(replace(spec, request="spark-w"))
    call = core.enqueue_call(specs)
    expected = hiredis.pack_command(
        ("EVALSHA", core.scripts[call.script].sha, len(call.keys), *call.keys, *call.args)
    )
    sender = EnqueueSender(None, core, depth=1, skip_existing=False)  # type: ignore[arg-type]
    assert b"".join(bytes(part) for part in sender.command(chunk)) == expected
    assert chunk.groups == ("g1",)
    assert chunk.without({"b:{x}"}).ids.to_pylist() == ["a", "c"]
    assert [c.count for c in chunk.split(2)] == [2, 1]


def test_skip_encoding_sends_the_bytes_of_ops_enqueue_skip() -> None:
    """With skip, rows that need no more than the record options are packed as
    `ops.enqueue_skip` packs the same jobs; one row with a delay sends the whole batch to
    `enqueue` (one call takes one script's arguments)."""
    core = QueueCore("q", QueueSettings())
    rows = {
        "id": ["a", "b", "c"],
        "n": [1, 2, 3],
        "priority": pa.array([0, None, 2000], pa.int32()),
        "max_failures": [None, 9, 7],
    }
    encoder = RowEncoder(
        core, default_task="t", id_prefix="w", request="spark-w", validate_data=True, skip=True
    )
    chunk = encoder.encode(pa.RecordBatch.from_pydict(rows), first_row=0)
    assert chunk.script == "enqueue_skip"
    specs = []
    for row in pa.RecordBatch.from_pydict(rows).to_pylist():
        options = {k: row[k] for k in ("id", "priority", "max_failures") if row[k] is not None}
        specs.append(core.spec("t", {"n": row["n"]}, options))
    call = ops.enqueue_skip(core.keys, specs, events_maxlen=core.settings.events_maxlen)
    expected = hiredis.pack_command(
        ("EVALSHA", core.scripts[call.script].sha, len(call.keys), *call.keys, *call.args)
    )
    sender = EnqueueSender(None, core, depth=1, skip_existing=False)  # type: ignore[arg-type]
    assert b"".join(bytes(part) for part in sender.command(chunk)) == expected
    delayed = pa.RecordBatch.from_pydict({**rows, "delay": [None, None, 5.0]})
    assert encoder.encode(delayed, first_row=0).script == "enqueue"


def test_payload_json_matches_serializers() -> None:
    """Column-wise JSON objects decode to what `serializers.dumps` of each row decodes to,
    types included (a float stays a float)."""
    import random

    rng = random.Random(7)
    floats = [0.1, 1e16, 1e-7, -0.0, 500.0, 1e300, 5e-324, 2.5e-5, 1e21, None]
    floats += [rng.uniform(-1e6, 1e6) * 10 ** rng.randint(-20, 20) for _ in range(500)]
    n = len(floats)
    batch = pa.RecordBatch.from_pydict(
        {"i": pa.array([rng.randint(-(2**63), 2**63 - 1) for _ in range(n)], pa.int64()),
         "f": pa.array(floats, pa.float64()),
         "f32": pa.array([rng.uniform(-1, 1) for _ in range(n)], pa.float32()),
         "s": [rng.choice(["eu", 'q"uote', "back\\slash", "ü", "", None, "😀"]) for _ in range(n)],
         "b": [rng.choice([True, False, None]) for _ in range(n)],
         'key "x"': pa.array([1] * n, pa.int8())}
    )  # fmt: skip

    def typed(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: typed(v) for k, v in value.items()}
        return type(value).__name__, value

    fast = json_objects(batch).to_pylist()
    slow = [serializers.dumps(row) for row in batch.to_pylist()]
    assert [typed(json.loads(a)) for a in fast] == [typed(json.loads(b)) for b in slow]


def test_charts_are_well_formed_svg() -> None:
    line = charts.line_chart("t", [0, 60, 120], {"completed": [1.0, 0.0, 5.0]}, unit="jobs / s")
    bars = charts.bar_chart("b", [("q<1>", {"p50": 0.1, "p95": 2.0, "p99": None})], unit="s")
    for svg in (line, bars):
        assert ET.fromstring(svg).tag.endswith("svg")
    assert "q&lt;1&gt;" in bars and "jobs / s" in line
    assert "no data" in charts.line_chart("empty", [], {}, unit="x")
    assert "no data" in charts.line_chart("zeros", [0, 60], {"failed": [0, 0]}, unit="x")


def test_throughput_has_every_bucket_of_its_window() -> None:
    from conveyor.integrations.spark.report import _throughput

    def row(kind: str, second: int, n: int) -> dict[str, object]:
        us = second * 1_000_000
        return {"kind": kind, "second": second, "n": n, "lo": us, "hi": us}

    # completions at 0 s and at 600 s, nothing between: the buckets between are zeros, so a
    # chart draws a drop to zero, not a straight line from one burst to the next
    got = _throughput([row("completed", 0, 50), row("completed", 600, 30), row("failed", 5, 2),
                       row("created", 0, 80), row("active", 1, 80)])  # fmt: skip
    size = got["bucket_seconds"]
    assert size == 5 and len(got["series"]) == 121
    assert got["series"][0] == {"t": "1970-01-01T00:00:00+00:00", "created": 80,
                                "completed": 50, "failed": 0, "retried": 0}  # fmt: skip
    assert got["series"][1]["failed"] == 2 and got["series"][120]["completed"] == 30
    assert sum(p["completed"] for p in got["series"][1:120]) == 0
    assert got["window"] == {"from": "1970-01-01T00:00:00+00:00",
                             "to": "1970-01-01T00:10:00+00:00"}  # fmt: skip


def test_the_page_shows_rates_as_percentages_and_priorities_by_name() -> None:
    from conveyor.integrations.spark.report_html import render

    row = {"jobs": 10, "retry_rate": 0.125, "failure_rate": 0.0, "stall_rate": None}
    html = render({"totals": {"jobs": 10, "retry_rate": 0.125},
                   "by_priority": [{"priority": "0", **row}, {"priority": "7", **row}],
                   "generated_at": "2026-11-25T13:40:02.5+00:00",
                   "throughput": {"window": {"from": "2026-11-25T13:00:00+00:00",
                                             "to": "2026-11-25T13:30:00+00:00"}}})  # fmt: skip
    assert "12.50 %" in html and "0.125" not in html
    assert "high (0)" in html and "<td>7</td>" in html
    assert "2026-11-25 13:40:02 UTC" in html and "2026-11-25 13:00:00 UTC to" in html


def test_importing_the_package_does_not_import_pyspark() -> None:
    code = (
        "import sys, conveyor, conveyor.integrations.spark as s; "
        "assert 'pyspark' not in sys.modules, 'pyspark imported'; print(s.JOBS_SCHEMA_VERSION)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"

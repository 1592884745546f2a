"""Pieces that need no SparkSession: Java check, options, row encoding, charts, imports."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="PySpark is not installed: pip install -e '.[spark]'")

import pyarrow as pa  # noqa: E402

from conveyor.client.core import QueueCore, QueueSettings  # noqa: E402
from conveyor.errors import (  # noqa: E402
    PayloadTooLargeError,
    UnknownOptionError,
    ValidationError,
)
from conveyor.integrations.spark import charts, session  # noqa: E402
from conveyor.integrations.spark.encode import RowEncoder  # noqa: E402
from conveyor.integrations.spark.options import Options, parse_instant_ms  # noqa: E402

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


def test_rows_are_encoded_with_conveyor_validation() -> None:
    batch = pa.RecordBatch.from_pydict(
        {"customer": [1, 2], "when": pa.array([0, 1_000_000], pa.timestamp("us", tz="UTC")),
         "priority": [5, None]}
    )  # fmt: skip
    specs = _encoder().specs(batch, first_row=10)
    assert [s.id for s in specs] == ["w-3-10", "w-3-11"]
    assert [s.priority for s in specs] == [5, 1000]  # null -> the queue's default
    assert {s.request for s in specs} == {"spark-w"}
    assert json.loads(specs[1].data) == {"customer": 2, "when": "1970-01-01T00:00:01.000000Z"}
    with pytest.raises(ValidationError, match="priority"):
        _encoder().specs(pa.RecordBatch.from_pydict({"n": [1], "priority": [-1]}), first_row=0)
    with pytest.raises(PayloadTooLargeError):
        _encoder().specs(pa.RecordBatch.from_pydict({"text": ["x" * 300]}), first_row=0)
    with pytest.raises(ValidationError, match="not JSON"):
        _encoder().specs(pa.RecordBatch.from_pydict({"data": ["{oops"]}), first_row=0)
    with pytest.raises(ValidationError, match="job id"):
        _encoder().specs(pa.RecordBatch.from_pydict({"id": ["has space"], "n": [1]}), first_row=0)


def test_charts_are_well_formed_svg() -> None:
    line = charts.line_chart("t", {"completed": [(0, 1.0), (60, 5.0)]}, unit="jobs / s")
    bars = charts.bar_chart("b", [("q<1>", {"p50": 0.1, "p95": 2.0, "p99": None})], unit="s")
    for svg in (line, bars):
        assert ET.fromstring(svg).tag.endswith("svg")
    assert "q&lt;1&gt;" in bars
    assert "no data" in charts.line_chart("empty", {}, unit="x")
    assert charts.nice_step(97) == 20


def test_importing_the_package_does_not_import_pyspark() -> None:
    code = (
        "import sys, conveyor, conveyor.integrations.spark as s; "
        "assert 'pyspark' not in sys.modules, 'pyspark imported'; print(s.JOBS_SCHEMA_VERSION)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"

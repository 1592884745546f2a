"""Spark Connect: the formats and `apply` from an `sc://` session, against a local Spark
Connect server started from the PySpark package (`SparkSession.builder.remote("local[2]")`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark.sql.connect", reason="PySpark is not installed")

pytestmark = pytest.mark.spark


@pytest.mark.timeout(300)  # a Spark Connect server's start takes 15-40 s
def test_write_read_and_apply_from_a_spark_connect_session(
    redis_url: str, queue_name: str, worker_runner: Any
) -> None:
    from conveyor.client.tasks import Tasks

    tasks = Tasks(queue_name)

    @tasks.task(name="square")
    async def square(data: dict[str, int]) -> int:
        return data["n"] ** 2

    worker_runner.start(tasks, concurrency=10)
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = dict(os.environ, TEST_REDIS_URL=redis_url, TEST_QUEUE=queue_name,
               PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]),
               SPARK_LOCAL_IP="127.0.0.1")  # fmt: skip
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("connect_app.py"))],
        env=env, capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    seen = json.loads(lines[-1][len("RESULT ") :])
    assert seen["session"].startswith("pyspark.sql.connect")
    assert seen["read"] == 20
    # the written jobs and apply's share the rows' data, not their ids: 20 of each ran
    assert seen["results"] == sorted(n * n for n in range(20))

"""The Spark suite: one session-scoped `local[2]` SparkSession for every test.

Skipped, with the reason shown, only when PySpark is not installed; a missing or too old
Java is a failure with the fix in the message. Every test module sets `pytestmark =
pytest.mark.spark`, so `-m "not spark"` leaves the suite out.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

try:
    import pyspark  # noqa: F401

    HAVE_PYSPARK = True
except ImportError:
    HAVE_PYSPARK = False

SKIP_REASON = "PySpark is not installed: pip install -e '.[spark]' (or make test)"


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if not HAVE_PYSPARK:
        pytest.skip(SKIP_REASON)
    from conveyor.integrations.spark import register
    from conveyor.integrations.spark.session import SparkSetupError, check_java

    try:
        check_java()
    except SparkSetupError as exc:
        pytest.fail(str(exc), pytrace=False)
    # Workers must run this interpreter (with conveyor and redis), not `python3` on PATH.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("conveyor-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()

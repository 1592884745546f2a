"""Starting Spark for Conveyor's commands: a Java check with a clear message, and a
session builder whose local defaults suit a laptop and whose `master` reaches a cluster."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from conveyor.errors import ConfigurationError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["JAVA_MIN", "SparkSetupError", "build_session", "check_java", "require_pyspark"]

JAVA_MIN = 17
_INSTALL_HINT = (
    "Spark 4 needs Java 17 or newer. Install it (Debian/Ubuntu: "
    "`apt-get install openjdk-17-jre-headless`; macOS: `brew install openjdk@17`) "
    "or point JAVA_HOME at one."
)


class SparkSetupError(ConfigurationError):
    """Spark cannot start here: Java or PySpark is missing or too old."""


def require_pyspark() -> None:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise SparkSetupError(
            "PySpark is not installed: pip install 'conveyor[spark]' (PySpark 4.x, pyarrow)"
        ) from None


def _java_binary() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def java_major(version_text: str) -> int | None:
    """17 from `openjdk version "17.0.15"`, 8 from `java version "1.8.0_402"`."""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', version_text)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def check_java() -> tuple[int, str]:
    """(major version, path) of the Java Spark will use; SparkSetupError if unusable."""
    binary = _java_binary()
    if binary is None:
        raise SparkSetupError(f"no Java found (no JAVA_HOME, no `java` on PATH). {_INSTALL_HINT}")
    try:
        done = subprocess.run(
            [binary, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SparkSetupError(f"cannot run {binary} -version: {exc}. {_INSTALL_HINT}") from None
    major = java_major(done.stderr + done.stdout)
    if major is None or major < JAVA_MIN:
        found = (done.stderr or done.stdout).strip().splitlines()[:1]
        raise SparkSetupError(f"{binary} is {found or 'of unknown version'}. {_INSTALL_HINT}")
    return major, binary


def _is_local(master: str | None) -> bool:
    return master is None or master.startswith("local")


def build_session(
    master: str | None = None,
    *,
    app_name: str = "conveyor",
    conf: Mapping[str, str] | None = None,
    register: bool = True,
) -> SparkSession:
    """A SparkSession for Conveyor's pipeline, archive and report commands.

    `master` is any Spark master URL (`local[4]`, `spark://host:7077`, `yarn`, ...); None
    keeps what spark-submit or the environment set, else `local[*]`. Locally the driver is
    bound to 127.0.0.1 and the Python workers run this interpreter. On a cluster, the
    executors need Conveyor installed (`pip install 'conveyor[spark]'` on every node).
    """
    require_pyspark()
    check_java()
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    settings = {
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }
    if _is_local(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.master(master or "local[*]")
        settings |= {
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.memory": "2g",
            # 200 shuffle partitions cost seconds per aggregation on a laptop
            "spark.sql.shuffle.partitions": str(max(4, 2 * (os.cpu_count() or 2))),
        }
    elif master is not None:
        builder = builder.master(master)
    for key, value in {**settings, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if register:
        from . import register as register_sources

        register_sources(spark)
    return spark

"""A real Spark standalone cluster: a master and a worker started from the
installed PySpark's own `spark-class` on loopback free ports; a driver
process (standalone_app.py) writes, reads and `apply`s against
`spark://127.0.0.1:PORT`, its tasks run by executors on that worker."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pyspark = pytest.importorskip(
    "pyspark", reason="PySpark is not installed: pip install -e '.[spark]'"
)

from conveyor import JobState, Queue  # noqa: E402
from support.workers import SRC, spawn_worker, wait_until  # noqa: E402

pytestmark = pytest.mark.spark

HERE = Path(__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _environment() -> dict[str, str]:
    # Executors run this interpreter with conveyor importable; everything on loopback.
    return {
        **os.environ,
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(SRC)]),
    }


def _spark_class(main: str, *args: str, log: Path) -> subprocess.Popen[bytes]:
    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(spark_class), main, *args],
            env=_environment(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as page:
            return int(json.load(page).get("aliveworkers", 0))
    except OSError:
        return 0


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("spark-standalone")
    port, ui = _free_port(), _free_port()
    master = _spark_class(
        "org.apache.spark.deploy.master.Master",
        "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui),
        log=base / "master.log",
    )  # fmt: skip
    worker = _spark_class(
        "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
        "--host", "127.0.0.1", "--port", str(_free_port()), "--webui-port", str(_free_port()),
        "--cores", "2", "--memory", "1g", "--work-dir", str(base / "work"),
        log=base / "worker.log",
    )  # fmt: skip
    try:
        wait_until(lambda: _alive_workers(ui) == 1, timeout=120, interval=0.5)
        yield f"spark://127.0.0.1:{port}"
    finally:
        for process in (worker, master):
            os.killpg(process.pid, signal.SIGTERM)
        for process in (worker, master):
            process.wait(30)


def test_write_read_and_apply_on_a_standalone_cluster(
    standalone: str, redis_url: str, queue_name: str
) -> None:
    written, applied = f"{queue_name}-w", f"{queue_name}-a"
    worker = spawn_worker(
        "standalone_app:tasks",
        redis_url,
        env={"TEST_QUEUE": applied, "PYTHONPATH": f"{HERE}{os.pathsep}{SRC}"},
    )
    try:
        app = str(HERE / "standalone_app.py")
        driver = subprocess.run(
            [sys.executable, app, standalone, redis_url, written, applied],
            env=_environment(), capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.communicate(timeout=30)
    assert driver.returncode == 0, driver.stderr[-3000:]
    seen = json.loads(driver.stdout.strip().splitlines()[-1])
    assert seen["master"] == standalone
    assert seen["executors"] >= 2  # the driver and at least one executor on the worker
    assert seen["waiting"] == 200
    assert (seen["applied"], seen["result_21"], seen["state_21"]) == (50, "42", "completed")
    with Queue(written, url=redis_url) as queue:
        assert queue.counts()[JobState.WAITING] == 200

"""A newcomer's first hour: one embedded Redis for the CLI and Python, owned by
`conveyor redis`, and the messages a first try runs into."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from conveyor import AsyncQueue, Queue, Tasks
from conveyor.client.local import DATA_DIR_ENV, answers, running_url, socket_path_for
from conveyor.errors import ConfigurationError
from conveyor.integrations.cli import main
from conveyor.integrations.embedded import EmbeddedRedis
from support.workers import APPS, SRC, wait_until

CLI = [sys.executable, "-m", "conveyor.integrations.cli"]


@pytest.fixture
def data_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private embedded-Redis data dir (short enough for sun_path), the
    Redis URL variables unset; whatever server ran there is stopped after."""
    for name in ("CONVEYOR_REDIS_URL", "REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    with tempfile.TemporaryDirectory(prefix="cv-", dir="/tmp") as name:
        path = Path(name).resolve()
        monkeypatch.setenv(DATA_DIR_ENV, str(path))
        try:
            yield path
        finally:
            EmbeddedRedis(data_dir=path).shutdown()


def cli_env(data_dir: Path, queue: str) -> dict[str, str]:
    unset = ("CONVEYOR_REDIS_URL", "REDIS_URL")
    environment = {k: v for k, v in os.environ.items() if k not in unset}
    return {
        **environment,
        "PYTHONPATH": f"{APPS}{os.pathsep}{SRC}",
        DATA_DIR_ENV: str(data_dir),
        "TEST_QUEUE": queue,
    }


@contextlib.contextmanager
def spawn(data_dir: Path, queue: str, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """`conveyor ARGS` in its own session; killed if still running after."""
    with subprocess.Popen(
        [*CLI, *args],
        env=cli_env(data_dir, queue),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as proc:
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()


# ----------------------------------------------------------------- one Redis everywhere


def test_python_finds_the_embedded_redis_the_cli_started(data_dir: Path, queue_name: str) -> None:
    done = CliRunner().invoke(main, ["enqueue", queue_name, "send", '{"to": "a"}', "--id", "j1"])
    assert done.exit_code == 0, done.output
    assert running_url() == f"unix://{socket_path_for(data_dir)}?db=0"
    with Queue(queue_name) as queue:  # no URL anywhere: the same server as the CLI's
        job = queue.get("j1")
        assert job is not None and job.data == {"to": "a"}
    tasks = Tasks(queue_name)
    assert tasks.queue().get("j1") is not None

    async def read() -> object:
        async with AsyncQueue(queue_name) as queue:
            return await queue.get("j1")

    assert asyncio.run(read()) is not None


def test_no_redis_says_the_exact_line_to_run(data_dir: Path) -> None:
    with pytest.raises(ConfigurationError) as raised:
        Queue("q")
    message = str(raised.value)
    assert f"{DATA_DIR_ENV}={data_dir} conveyor redis" in message
    assert "export CONVEYOR_REDIS_URL=redis://" in message


def test_the_line_for_the_default_data_dir_is_a_cd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("CONVEYOR_REDIS_URL", "REDIS_URL", DATA_DIR_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match=f"cd {tmp_path} && conveyor redis"):
        Queue("q")


# ----------------------------------------------------------------- the server's lifetime


def test_stopping_the_worker_that_started_redis_leaves_it_to_the_other(
    data_dir: Path, queue_name: str
) -> None:
    with spawn(data_dir, queue_name, "worker", "kill_app:tasks") as first:
        wait_until(lambda: running_url() is not None, timeout=30)
        with (
            spawn(data_dir, queue_name, "worker", "kill_app:tasks") as second,
            Queue(queue_name) as queue,
        ):
            wait_until(lambda: len(queue.workers()) == 2, timeout=30)
            first.send_signal(signal.SIGTERM)
            assert first.wait(30) == 0
            assert answers(str(socket_path_for(data_dir)))
            job = queue.enqueue("sleepy", {"seconds": 0})
            assert queue.wait_result(job.id, timeout=30)["pid"] == second.pid


def test_ctrl_c_stops_conveyor_redis_at_once_and_removes_its_socket(data_dir: Path) -> None:
    with spawn(data_dir, "unused", "redis") as server:
        wait_until(lambda: running_url() is not None, timeout=30)
        started = time.monotonic()
        server.send_signal(signal.SIGINT)
        assert server.wait(30) == 0
        # the server used to ignore SIGTERM (blocked in its inherited mask) and be
        # SIGKILLed after 10 s, leaving its socket behind
        assert time.monotonic() - started < 8
        assert not socket_path_for(data_dir).exists()


def test_conveyor_redis_adopts_and_stop_ends_a_server_a_worker_started(
    data_dir: Path, queue_name: str
) -> None:
    runner = CliRunner()
    assert runner.invoke(main, ["enqueue", queue_name, "send"]).exit_code == 0  # starts it
    assert running_url() is not None  # left running by the command that started it
    stopped = runner.invoke(main, ["redis", "--stop"])
    assert stopped.exit_code == 0 and "stopped" in stopped.output
    assert running_url() is None and not socket_path_for(data_dir).exists()
    assert "none ran" in runner.invoke(main, ["redis", "--stop"]).output

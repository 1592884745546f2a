"""A newcomer's first hour: one embedded Redis for the CLI and Python, owned by
`conveyor redis`, and the messages a first try runs into."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


# ----------------------------------------------------------------- the CLI's messages


def test_enqueue_with_data_that_is_not_json_says_how_to_quote(redis_url: str) -> None:
    done = CliRunner().invoke(main, ["enqueue", "q", "t", "abc", "--url", redis_url, "--force"])
    assert done.exit_code == 2
    assert "not JSON" in done.output and "'\"abc\"'" in done.output
    assert "Traceback" not in done.output


def test_enqueue_refuses_a_task_no_live_worker_runs(
    redis_url: str, queue_name: str, worker_runner: Any
) -> None:
    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task
    async def known(data: None) -> None: ...

    handle = worker_runner.start(tasks)
    try:
        with Queue(queue_name, url=redis_url) as queue:
            wait_until(lambda: queue.workers(), timeout=30)
            runner = CliRunner()
            refused = runner.invoke(main, ["enqueue", queue_name, "nosuch", "--url", redis_url])
            assert refused.exit_code == 2, refused.output
            assert "no live worker" in refused.output and "known" in refused.output
            assert sum(queue.counts().values()) == 0  # nothing written
            forced = runner.invoke(
                main, ["enqueue", queue_name, "nosuch", "--url", redis_url, "--force"]
            )
            assert forced.exit_code == 0, forced.output
    finally:
        handle.stop()


def test_enqueue_without_live_workers_warns(redis_url: str, queue_name: str) -> None:
    done = CliRunner().invoke(main, ["enqueue", queue_name, "t", "--url", redis_url])
    assert done.exit_code == 0, done.output
    assert "warning: no live worker" in done.output


def test_a_negative_priority_is_refused_as_out_of_range(redis_url: str) -> None:
    done = CliRunner().invoke(
        main, ["enqueue", "q", "t", "--url", redis_url, "--force", "--priority", "-5"]
    )
    assert done.exit_code != 0
    assert "-5" in str(done.exception) or "-5" in done.output
    assert "priority" in (str(done.exception) + done.output)
    assert "unknown priority" not in (str(done.exception) + done.output).lower()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://localhost:notaport", "not a valid Redis URL"),
        ("http://user:secret@example.com", "not a Redis URL"),
    ],
)
def test_urls_that_are_not_redis_get_a_clear_message(url: str, expected: str) -> None:
    proc = subprocess.run(
        [*CLI, "info", "q", "--url", url], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert expected in proc.stderr and "Traceback" not in proc.stderr
    assert "secret" not in proc.stderr


def test_a_port_that_is_not_redis_gets_a_clear_message() -> None:
    with socket.socket() as listener:  # answers like a non-Redis server would
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def greet() -> None:
            with contextlib.suppress(OSError):
                while True:
                    conn, _ = listener.accept()
                    conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
                    conn.close()

        threading.Thread(target=greet, daemon=True).start()
        proc = subprocess.run(
            [*CLI, "info", "q", "--url", f"redis://127.0.0.1:{port}/0"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "not Redis at all" in proc.stderr and "Traceback" not in proc.stderr


def test_worker_refuses_a_negative_grace() -> None:
    done = CliRunner().invoke(main, ["worker", "kill_app:tasks", "--grace", "-5"])
    assert done.exit_code == 2 and "--grace" in done.output


@pytest.mark.parametrize(
    ("source", "first_line", "user_lines"),
    [
        (
            "import not_installed_anywhere\n",
            "ModuleNotFoundError: No module named 'not_installed_anywhere'",
            ['broken_app.py", line 1, in <module>', "import not_installed_anywhere"],
        ),
        (
            "def helper():\n    return 1 / 0\n\nhelper()\n",
            "ZeroDivisionError: division by zero",
            ['broken_app.py", line 4, in <module>', 'line 2, in helper', "return 1 / 0"],
        ),
        (
            "x = 1\ndef f(:\n    pass\n",
            "SyntaxError: invalid syntax",
            ['broken_app.py", line 2', "def f(:"],
        ),
        (
            "from conveyor import Tasks\ntasks = Tasks('bad name!')\n",
            "InvalidNameError: invalid queue name 'bad name!'",
            ['broken_app.py", line 2, in <module>', "tasks = Tasks('bad name!')"],
        ),
    ],
)
def test_an_error_inside_the_module_shows_one_line_and_the_users_frames(
    tmp_path: Path, source: str, first_line: str, user_lines: list[str]
) -> None:
    (tmp_path / "broken_app.py").write_text(source)
    proc = subprocess.run(
        [*CLI, "worker", "broken_app:tasks", "--url", "redis://127.0.0.1:1/0"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    first, *rest = proc.stderr.splitlines()
    assert first.startswith("error: importing module 'broken_app' failed: " + first_line), first
    assert "Traceback" not in proc.stderr
    for line in user_lines:
        assert line in proc.stderr, proc.stderr
    files = [line for line in rest if line.lstrip().startswith("File ")]
    assert files and all("broken_app.py" in line for line in files), proc.stderr


def test_version() -> None:
    done = CliRunner().invoke(main, ["--version"])
    assert done.exit_code == 0 and done.output.startswith("conveyor ")


# ----------------------------------------------------------------- packaging


def test_the_version_has_one_source() -> None:
    import conveyor

    assert conveyor.__version__ == importlib.metadata.version("conveyor")
    assert CliRunner().invoke(main, ["--version"]).output.strip().endswith(conveyor.__version__)


def test_the_license_file_matches_the_metadata() -> None:
    root = Path(__file__).resolve().parents[1]
    assert (root / "LICENSE").read_text().startswith("MIT License")
    metadata = importlib.metadata.metadata("conveyor")
    assert metadata["License-Expression"] == "MIT"  # SPDX (PEP 639), not a classifier


def test_the_cli_starts_without_fcntl() -> None:
    """Windows has no fcntl: only the embedded Redis needs it, not the CLI."""
    script = (
        "import sys; sys.modules['fcntl'] = None\n"
        "from conveyor.integrations.cli import main\n"
        "main(['--version'])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("conveyor ")


def test_the_demos_concurrency_is_optional_and_refused_below_one() -> None:
    """Left out, each part of `make demo` takes its own default (the core's workers 50
    slots, the Spark pipeline's `WORKER_CONCURRENCY`); a bad one is refused before anything
    starts."""
    from conveyor.integrations.demo import CORE_CONCURRENCY, parse, slots
    from conveyor.integrations.spark.pipeline import WORKER_CONCURRENCY

    assert parse([]).concurrency is None
    assert parse(["--concurrency", "8"]).concurrency == 8
    assert slots(parse([]), CORE_CONCURRENCY) == 50
    assert slots(parse([]), WORKER_CONCURRENCY) == 512
    assert slots(parse(["--concurrency", "8"]), WORKER_CONCURRENCY) == 8
    with pytest.raises(SystemExit):
        parse(["--concurrency", "0"])

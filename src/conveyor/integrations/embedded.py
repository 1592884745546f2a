"""The newcomer default (DESIGN.md §6): a :class:`RedisProcess` on a unix socket in a local data
directory with AOF persistence, shared by every process that points at the same directory.
`conveyor redis` owns its lifetime (it stops the server on Ctrl-C, whoever started it); a worker
or another command that had to start it leaves it running (``keep_running``), so stopping one
worker never takes Redis away from another.

Nothing here reads the environment or touches the filesystem at import time.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Self

from conveyor.client.local import (
    DATA_DIR_ENV,
    answers,
    default_data_dir,
    socket_path_for,
    unix_url,
)
from conveyor.integrations.redis_server import (
    RedisProcess,
    RedisStartError,
    find_redis_server,
    shut_down,
)

__all__ = ["DATA_DIR_ENV", "EmbeddedRedis", "default_data_dir"]


@contextlib.contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    # Held while we check for a running server and start one, so two processes starting at
    # the same moment cannot both launch a server onto the same AOF files. Imported here: the
    # CLI imports this module, and must start without fcntl (Windows) when given a --url.
    import fcntl

    with open(path, "ab") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _check_socket_owner(path: Path) -> None:
    # The fallback socket lives in /tmp, where another user could plant one for us to talk to.
    try:
        owner = path.lstat().st_uid
    except FileNotFoundError:
        return
    if owner != os.getuid():
        raise RedisStartError(f"{path} belongs to another user (uid {owner}); refusing to use it")


def _ignore_everything_in(directory: Path) -> None:
    # A newcomer's ./.conveyor sits inside their project: keep it out of their git history.
    marker = directory / ".gitignore"
    if not marker.exists():
        marker.write_text("# Created by Conveyor: local Redis data.\n*\n", encoding="utf-8")


class EmbeddedRedis:
    """The newcomer default: a private Redis on a unix socket in a local data directory.

    AOF is on (``appendfsync everysec``) and ``maxmemory-policy`` is ``noeviction``, so queued
    jobs survive restarts and are never silently evicted. If a server already answers on the
    data directory's socket (another process started it), it is reused and left running on exit.
    A server this instance started is stopped on exit, unless ``keep_running``: then it is left
    running for every other process of the data directory (``shutdown()`` stops it later).
    """

    def __init__(
        self,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        binary: str | os.PathLike[str] | None = None,
        startup_timeout: float = 10.0,
        keep_running: bool = False,
    ) -> None:
        chosen = Path(data_dir) if data_dir is not None else default_data_dir()
        self._data_dir = chosen.resolve()
        self._socket_path = socket_path_for(self._data_dir)
        self._binary = binary
        self._startup_timeout = startup_timeout
        self._keep_running = keep_running
        self._process: RedisProcess | None = None
        self._active = False

    @property
    def data_dir(self) -> Path:
        return self._data_dir

    @property
    def socket_path(self) -> Path:
        return self._socket_path

    @property
    def url(self) -> str:
        return unix_url(self._socket_path)

    @property
    def owned(self) -> bool:
        """True when this instance started the server (and so will stop it)."""
        return self._process is not None

    @property
    def process(self) -> RedisProcess | None:
        """The server process when this instance started it, else None."""
        return self._process

    def start(self) -> Self:
        """Reuse the server answering on our socket, or start one; return self."""
        if self._active:
            raise RedisStartError(f"already started: {self.url}")
        self._data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        _ignore_everything_in(self._data_dir)
        with _exclusive_lock(self._data_dir / "embedded.lock"):
            _check_socket_owner(self._socket_path)
            if not answers(str(self._socket_path)):
                self._process = self._new_process().start()
        self._active = True
        return self

    def stop(self) -> None:
        """Stop the server if this instance started it (and was not asked to
        keep it running); a reused server keeps running."""
        if self._process is not None:
            if self._keep_running:
                self._process.detach()
            else:
                self._process.stop()
        self._process = None
        self._active = False

    def shutdown(self, timeout: float = 10.0) -> bool:
        """Stop the server running on our socket, whoever started it (Redis
        flushes its AOF and removes its socket); False if none ran."""
        if self._process is not None:
            self._process.stop(timeout)
            self._process = None
            self._active = False
            return True
        _check_socket_owner(self._socket_path)
        if not answers(str(self._socket_path)):
            return False
        shut_down(str(self._socket_path), timeout)
        self._active = False
        return True

    def _new_process(self) -> RedisProcess:
        # Resolved only now: reusing a running server must not require a local binary.
        binary = self._binary if self._binary is not None else find_redis_server()
        return RedisProcess(
            binary=binary,
            data_dir=self._data_dir,
            unixsocket=self._socket_path,
            appendonly=True,
            appendfsync="everysec",
            # hash-max-ziplist-value (the 6.2 name; 7.x reads it as the listpack
            # one): a job's data is stored in 64-byte pieces anyway (protocol
            # §4.1); this keeps finished records with a result or error of up
            # to 1 KiB compact listpacks too
            extra_args=(
                "--maxmemory-policy",
                "noeviction",
                "--hash-max-ziplist-value",
                "1024",
            ),  # fmt: skip
            startup_timeout=self._startup_timeout,
        )

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
        return f"EmbeddedRedis(url={self.url!r}, owned={self.owned})"

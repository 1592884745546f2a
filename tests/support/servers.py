"""Extra private redis-servers for fault tests (AOF, restarts, kills, odd configs)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from conveyor.integrations.redis_server import RedisProcess

# Unix socket paths must fit in ~107 bytes; pytest's tmp_path often does not leave room.
_SHORT_TMP = "/tmp"


class ServerFactory:
    """Starts servers for one test and stops every one of them at teardown."""

    def __init__(self, *, binary: str, base_dir: Path) -> None:
        self._binary = binary
        self._base_dir = base_dir
        self._servers: list[RedisProcess] = []
        self._socket_dir: Path | None = None

    @property
    def servers(self) -> tuple[RedisProcess, ...]:
        return tuple(self._servers)

    @property
    def binary(self) -> str:
        return self._binary

    def adopt(self, server: RedisProcess) -> RedisProcess:
        """A server started some other way (a sentinel, say), stopped at teardown too."""
        self._servers.append(server)
        return server

    def __call__(
        self,
        *,
        binary: str | None = None,
        port: int | None = None,
        unixsocket: bool = False,
        appendonly: bool = False,
        appendfsync: str = "everysec",
        save: str = "",
        extra_args: Sequence[str] = (),
        start: bool = True,
    ) -> RedisProcess:
        """A new server in its own data dir; ``unixsocket=True`` adds a short socket path."""
        number = len(self._servers)
        server = RedisProcess(
            binary=binary or self._binary,
            data_dir=self._base_dir / f"redis-{number}",
            port=port,
            unixsocket=self._short_socket_dir() / f"{number}.sock" if unixsocket else None,
            appendonly=appendonly,
            appendfsync=appendfsync,
            save=save,
            extra_args=extra_args,
        )
        self._servers.append(server)
        return server.start() if start else server

    def stop_all(self) -> None:
        try:
            for server in self._servers:
                server.stop(timeout=5.0)
        finally:
            if self._socket_dir is not None:
                shutil.rmtree(self._socket_dir, ignore_errors=True)

    def _short_socket_dir(self) -> Path:
        if self._socket_dir is None:
            self._socket_dir = Path(tempfile.mkdtemp(prefix="cv-", dir=_SHORT_TMP))
        return self._socket_dir

"""Where the embedded Redis of a data directory listens, and whether it runs.

One rule for every side: the CLI (integrations/embedded.py starts and stops
the server) and the clients (Queue, AsyncQueue, Tasks, the worker) look for
the same unix socket in the same data directory, so a newcomer's producer
and worker meet on one server without a URL. Nothing here starts a process,
and nothing reads the environment or touches the filesystem at import time.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
from pathlib import Path
from urllib.parse import quote

__all__ = [
    "DATA_DIR_ENV",
    "answers",
    "default_data_dir",
    "running_url",
    "socket_path_for",
    "unix_url",
]

DATA_DIR_ENV = "CONVEYOR_DATA_DIR"
_PING = b"*1\r\n$4\r\nPING\r\n"
# sun_path is 108 bytes on Linux and 104 on macOS, the trailing NUL included.
_MAX_SOCKET_PATH_BYTES = 103 if sys.platform == "darwin" else 107
# Not tempfile.gettempdir(): on macOS that is a long /var/folders/... path, the very problem
# the fallback exists to avoid.
_SHORT_SOCKET_DIR = Path("/tmp")


def default_data_dir() -> Path:
    """``$CONVEYOR_DATA_DIR`` if set, else ``./.conveyor`` under the current directory."""
    configured = os.environ.get(DATA_DIR_ENV)
    return Path(configured) if configured else Path.cwd() / ".conveyor"


def socket_path_for(data_dir: Path) -> Path:
    """The embedded server's socket for a (resolved) data directory."""
    preferred = data_dir / "redis.sock"
    if len(os.fsencode(preferred)) <= _MAX_SOCKET_PATH_BYTES:
        return preferred
    # Too long for sun_path: use a short, stable path derived from the data dir, so every
    # process that uses this data dir still finds the same server. The uid keeps users apart.
    digest = hashlib.sha256(os.fsencode(data_dir)).hexdigest()[:16]
    return _SHORT_SOCKET_DIR / f"conveyor-{os.getuid()}-{digest}.sock"


def unix_url(path: Path) -> str:
    return f"unix://{quote(str(path))}?db=0"


def answers(address: str | tuple[str, int], timeout: float = 0.5) -> bool:
    """True when a Redis server at ``address`` (socket path or host/port) serves commands."""
    # A raw PING needs no client library and tells "still loading the AOF" (-LOADING: not
    # ready) from any other reply (-NOAUTH on a server with a password is up and serving,
    # just not to us).
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(address)
            conn.sendall(_PING)
            reply = conn.recv(64)
    except OSError:
        return False
    return bool(reply) and not reply.startswith(b"-LOADING")


def running_url(data_dir: Path | None = None) -> str | None:
    """The URL of the embedded Redis running in `data_dir` (default: the
    same as the CLI's), or None when none answers there. A socket owned by
    another user (the /tmp fallback) is never used."""
    if not hasattr(socket, "AF_UNIX") or sys.platform == "win32":
        return None  # the embedded Redis runs on Linux and macOS only
    chosen = (data_dir if data_dir is not None else default_data_dir()).resolve()
    path = socket_path_for(chosen)
    try:
        if path.lstat().st_uid != os.getuid():
            return None
    except FileNotFoundError:
        return None
    return unix_url(path) if answers(str(path)) else None

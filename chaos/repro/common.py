"""Shared bits of the bug reproductions (docs/reliability.md §6). Run from the repo root:
``.venv/bin/python chaos/repro/b4.py``. Each starts its own private redis-server."""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from conveyor.integrations.redis_server import RedisProcess, find_redis_server  # noqa: E402


def server(*extra: str) -> RedisProcess:
    data_dir = tempfile.mkdtemp(prefix="conveyor-repro-")
    return RedisProcess(binary=find_redis_server(), data_dir=data_dir, extra_args=extra).start()


def worker(url: str, queue: str = "r", conc: int = 4, lease: float = 2.0, *extra: str):
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        CHAOS_URL=url,
        CHAOS_QUEUE=queue,
        CHAOS_LEDGER=tempfile.mktemp(prefix="conveyor-repro-ledger-"),
    )
    cmd = [str(Path(sys.executable).parent / "conveyor"), "worker", "chaos.app:tasks",
           "--concurrency", str(conc), "--lease", str(lease), *extra]  # fmt: skip
    proc = subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    atexit.register(proc.kill)  # never outlives the reproduction, whatever happens in it
    return proc


def fault_proxy(upstream_port: int):  # type: ignore[no-untyped-def]
    """chaos.proxy.FaultProxy (imported here, once the repo root is on the path)."""
    from chaos.proxy import FaultProxy

    return FaultProxy(upstream_port)

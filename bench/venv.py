"""The peers' virtualenv (.venv-bench): created or updated from requirements-peers.txt."""

from __future__ import annotations

import contextlib
import hashlib
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from bench.systems import PEER_VENV, REQUIREMENTS

STAMP = PEER_VENV / ".bench-requirements.sha256"
DISTRIBUTIONS = {
    "arq": "arq", "saq": "saq", "rq": "rq", "dramatiq": "dramatiq", "huey": "huey",
    "celery": "celery", "taskiq": "taskiq", "taskiq-redis": "taskiq-redis", "bullmq": "bullmq",
    "kombu": "kombu", "redis": "redis", "hiredis": "hiredis", "matplotlib": "matplotlib",
}  # fmt: skip


def _digest() -> str:
    return hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()


def peer_python() -> Path:
    return PEER_VENV / "bin" / "python"


def ensure_peer_venv(*, install: bool = True) -> str | None:
    """None when .venv-bench is ready, else what is wrong (the peers then report it)."""
    if STAMP.exists() and STAMP.read_text().strip() == _digest() and peer_python().exists():
        return None
    if not install:
        return f"{PEER_VENV} is missing or stale (run `make bench` without --no-install)"
    print(f"bench: installing the peers into {PEER_VENV} ...", flush=True)
    try:
        if not peer_python().exists():
            subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
        pip = [str(peer_python()), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, "--upgrade", "pip"], check=True)
        subprocess.run([*pip, "-r", str(REQUIREMENTS)], check=True)
    except (subprocess.CalledProcessError, OSError) as exc:
        return f"installing {REQUIREMENTS.name} failed: {exc}"
    STAMP.write_text(_digest() + "\n")
    return None


def versions(peers: list[str], peer_venv_ok: bool) -> dict[str, str]:
    """Installed versions: Conveyor's side from here, the peers' from .venv-bench."""
    found = {}
    for dist in ("conveyor", "redis", "hiredis"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[f"{dist} (.venv)"] = metadata.version(dist)
    try:
        server = subprocess.run(
            ["redis-server", "--version"], capture_output=True, text=True, check=True
        ).stdout.split()
        found["redis-server"] = next(w[2:] for w in server if w.startswith("v="))
    except (OSError, subprocess.CalledProcessError, StopIteration):
        pass
    if peers and peer_venv_ok:
        code = (
            "import json,importlib.metadata as m\n"
            f"names={list(DISTRIBUTIONS.values())!r}\n"
            "out={}\n"
            "for n in names:\n"
            "    try: out[n]=m.version(n)\n"
            "    except m.PackageNotFoundError: pass\n"
            "print(json.dumps(out))"
        )
        try:
            text = subprocess.run(
                [str(peer_python()), "-c", code], capture_output=True, text=True, check=True
            ).stdout
            found.update(
                {
                    f"{k} (.venv-bench)" if k in ("redis", "hiredis") else k: v
                    for k, v in json.loads(text).items()
                }
            )
        except (OSError, subprocess.CalledProcessError, ValueError):
            pass
    return found

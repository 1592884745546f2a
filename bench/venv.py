"""The peers' virtualenvs (.venv-bench, .venv-bench-<group>), created or updated on demand
from bench/requirements/<group>.txt."""

from __future__ import annotations

import contextlib
import hashlib
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from bench.systems import MAIN_VENV, requirements, venv_dir

STAMP = ".bench-requirements.sha256"
# The distributions whose versions the report lists, where a venv has them.
DISTRIBUTIONS = (
    "arq", "saq", "rq", "dramatiq", "huey", "celery", "kombu", "taskiq", "taskiq-redis",
    "bullmq", "streaq", "coredis", "pydocket", "chasquimq", "redis", "hiredis",
)  # fmt: skip


def _digest(group: str) -> str:
    return hashlib.sha256(requirements(group).read_bytes()).hexdigest()


def venv_python(group: str) -> Path:
    return venv_dir(group) / "bin" / "python"


def peer_python() -> Path:
    """The main peers' venv's interpreter (it holds matplotlib for the chart)."""
    return venv_python(MAIN_VENV)


def ensure_venv(group: str, *, install: bool = True) -> str | None:
    """None when the group's venv is ready, else what is wrong (its peers then report it)."""
    stamp = venv_dir(group) / STAMP
    python = venv_python(group)
    if stamp.exists() and stamp.read_text().strip() == _digest(group) and python.exists():
        return None
    if not install:
        return f"{venv_dir(group).name} is missing or stale (run `make bench` without --no-install)"
    print(f"bench: installing {requirements(group).name} into {venv_dir(group)} ...", flush=True)
    try:
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv_dir(group))], check=True)
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, "--upgrade", "pip"], check=True)
        subprocess.run([*pip, "-r", str(requirements(group))], check=True)
    except (subprocess.CalledProcessError, OSError) as exc:
        return f"installing {requirements(group).name} failed: {exc}"
    stamp.write_text(_digest(group) + "\n")
    return None


def ensure_peer_venv(*, install: bool = True) -> str | None:
    """The main group only (the smoke test's check)."""
    return ensure_venv(MAIN_VENV, install=install)


def versions(groups: dict[str, bool], server_binary: str = "redis-server") -> dict[str, str]:
    """Installed versions: Conveyor's side from here, each ready peer venv's from itself,
    and the queue server's (its first word: Redis or Valkey)."""
    found = {}
    for dist in ("conveyor", "redis", "hiredis"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[f"{dist} (.venv)"] = metadata.version(dist)
    try:
        server = subprocess.run(
            [server_binary, "--version"], capture_output=True, text=True, check=True
        ).stdout.split()
        version = next(w[2:] for w in server if w.startswith("v="))
        found["redis-server"] = version if server[0] == "Redis" else f"{server[0]} {version}"
    except (OSError, subprocess.CalledProcessError, StopIteration):
        pass
    code = (
        "import json,importlib.metadata as m\n"
        f"names={list(DISTRIBUTIONS)!r}\n"
        "out={}\n"
        "for n in names:\n"
        "    try: out[n]=m.version(n)\n"
        "    except m.PackageNotFoundError: pass\n"
        "print(json.dumps(out))"
    )
    for group, ready in groups.items():
        if not ready:
            continue
        try:
            text = subprocess.run(
                [str(venv_python(group)), "-c", code], capture_output=True, text=True, check=True
            ).stdout
        except (OSError, subprocess.CalledProcessError):
            continue
        with contextlib.suppress(ValueError):
            found.update({f"{k} ({venv_dir(group).name})": v for k, v in json.loads(text).items()})
    return found

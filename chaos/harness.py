"""Processes and servers of one scenario: private redis-servers, real worker processes in
their own sessions (so SIGKILL is real), a producer that writes the ledger, bounded waits.

Every loop here is bounded in count and in time; every address is 127.0.0.1 (or a unix
socket in the scenario's own directory).
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from chaos.ledger import Ledger
from conveyor import JobRequest, Queue, QueueSettings
from conveyor.client.connection import slot_route
from conveyor.errors import ConnectionLostError, UncertainWriteError
from conveyor.integrations.redis_server import RedisProcess, find_redis_server
from conveyor.protocol.keys import QueueKeys

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CONVEYOR = BIN / "conveyor"
# Debian's multiarch path (x86_64-linux-gnu, aarch64-linux-gnu, ...); `make tools` installs it.
FAKETIME_LIB = next(
    iter(sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))),
    Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"),
)
EVENTS_MAXLEN = 2_000_000
_URL_VARS = ("CONVEYOR_REDIS_URL", "REDIS_URL")


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll `predicate` until true or `timeout` s pass (at most timeout/interval + 1 polls)."""
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / interval) + 2):
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return bool(predicate())


def settings(**overrides: Any) -> QueueSettings:
    return QueueSettings(events_maxlen=overrides.pop("events_maxlen", EVENTS_MAXLEN), **overrides)


def admin(url: str, queue: str = "chaos", **kwargs: Any) -> redis.Redis:
    """A raw client for the harness's own inspection and fault injection; for
    a redis+cluster:// URL, on the master that serves `queue`'s slot; for a
    redis+sentinel:// URL, on the service's master of now."""
    route = slot_route(url, QueueKeys("conveyor", queue))
    if route is not None:
        url = route.url_for(*route.address())
    return redis.Redis.from_url(url, socket_connect_timeout=2, **kwargs)


# --------------------------------------------------------------------------- workers


@dataclass
class WorkerProc:
    index: int
    popen: subprocess.Popen[bytes]
    log_path: Path
    started: float

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)


class WorkerPool:
    """`conveyor worker chaos.app:tasks` processes, each in a session of its own."""

    def __init__(
        self,
        scene: Scene,
        url: str,
        *,
        count: int,
        queue: str = "chaos",
        concurrency: int = 10,
        lease: float = 2.0,
        grace: float = 5.0,
        env: dict[str, str] | None = None,
        faketime: Sequence[str | None] | str | None = None,
        target: str = "chaos.app:tasks",
        args: Sequence[str] = (),
    ) -> None:
        self.scene = scene
        self.args = list(args)  # more `conveyor worker` options
        self.url = url
        self.count = count
        self.queue = queue
        self.concurrency = concurrency
        self.lease = lease
        self.grace = grace
        self.extra_env = dict(env or {})
        self.target = target
        if faketime is None or isinstance(faketime, str):
            faketime = [faketime] * count
        self.faketime = list(faketime)
        self.procs: list[WorkerProc | None] = [None] * count
        self.number = len(scene.pools)
        self.spawned = 0
        self.all_procs: list[WorkerProc] = []

    def _env(self, index: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _URL_VARS}
        env.update(
            PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]),  # this checkout
            PYTHONUNBUFFERED="1",
            CHAOS_URL=self.url,  # by environment: a password never shows in `ps`
            CHAOS_QUEUE=self.queue,
            CHAOS_LEDGER=str(self.scene.ledger_path),
            CHAOS_SCRATCH=str(self.scene.scratch),
            CHAOS_EVENTS_MAXLEN=str(EVENTS_MAXLEN),
        )
        env.update(self.extra_env)
        skew = self.faketime[index]
        if skew is not None:
            if not FAKETIME_LIB.exists():
                raise RuntimeError("libfaketime is missing: apt-get install -y faketime")
            env.update(LD_PRELOAD=str(FAKETIME_LIB), FAKETIME=skew, DONT_FAKE_MONOTONIC="1")
        return env

    def command(self) -> list[str]:
        return [
            str(CONVEYOR), "-v", "worker", self.target,
            "--concurrency", str(self.concurrency),
            "--lease", str(self.lease),
            "--grace", str(self.grace),
            *self.args,
        ]  # fmt: skip

    def start(self, index: int | None = None) -> None:
        for i in range(self.count) if index is None else [index]:
            self.spawned += 1
            log_path = self.scene.dir / f"worker-p{self.number}-{i}-{self.spawned}.log"
            with open(log_path, "wb") as log:
                popen = subprocess.Popen(
                    self.command(),
                    cwd=ROOT,
                    env=self._env(i),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            proc = WorkerProc(i, popen, log_path, time.monotonic())
            self.procs[i] = proc
            self.all_procs.append(proc)

    def live(self) -> list[WorkerProc]:
        return [p for p in self.procs if p is not None and p.alive]

    def kill(self, index: int, sig: int = signal.SIGKILL, *, what: str = "kill") -> int:
        proc = self.procs[index]
        assert proc is not None
        # the pid column is the victim's: the checker finds the jobs it held
        self.scene.ledger.record(what, f"worker-{index}", 0, signal.Signals(sig).name, pid=proc.pid)
        proc.signal(sig)
        if sig == signal.SIGKILL:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(5)
                # reaped: no run of it outlasts this entry (races.run_spans)
                self.scene.ledger.record("dead", f"worker-{index}", 0, "SIGKILL", pid=proc.pid)
        return proc.pid

    def respawn_dead(self) -> int:
        """Restart every worker that exited; returns how many."""
        n = 0
        for i, proc in enumerate(self.procs):
            if proc is not None and not proc.alive:
                self.start(i)
                n += 1
        return n

    def wait_ready(self, timeout: float = 15.0) -> bool:
        """Until every live worker has announced itself in the queue's roll call."""
        client = admin(self.url, self.queue)
        keys = QueueKeys("conveyor", self.queue)
        try:

            def ready() -> bool:
                try:
                    ids = client.zrange(keys.workers, 0, -1)
                    pids = set()
                    for raw in client.mget([keys.worker(i.decode()) for i in ids]) if ids else []:
                        if raw:
                            pids.add(int(re.search(rb'"pid": (\d+)', raw).group(1)))  # type: ignore[union-attr]
                except redis.RedisError:
                    return False
                return all(p.pid in pids for p in self.live())

            return wait_until(ready, timeout, 0.1)
        finally:
            client.close()

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (then a second SIGTERM, then SIGKILL) every worker this pool started."""
        procs = [p for p in self.all_procs if p.alive]
        for p in procs:
            p.signal(signal.SIGCONT)
            p.signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(max(0.1, deadline - time.monotonic()))
        for p in procs:
            if p.alive:
                p.signal(signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.popen.wait(5)

    def logs(self) -> str:
        parts = []
        for p in self.all_procs:
            with contextlib.suppress(OSError):
                parts.append(
                    f"--- {p.log_path.name} ---\n" + p.log_path.read_text(errors="replace")
                )
        return "\n".join(parts)


_RECORD_START = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [A-Z]+ ")


def unhandled_tracebacks(logs: str) -> list[str]:
    """The tracebacks in worker logs that no job-failure line carries: a failed job's own
    traceback is logged on purpose (logger `conveyor.jobs`); any other is an unhandled
    exception. Returns the first line of each record that holds one."""
    found, header = [], ""
    for line in logs.splitlines():
        if _RECORD_START.match(line) or line.startswith("--- "):
            header = line
        elif line.startswith("Traceback") and " conveyor.jobs: " not in header:
            found.append(header or line)
    return found


# --------------------------------------------------------------------------- producer


@dataclass
class Enqueue:
    """One job the producer means to enqueue."""

    id: str
    task: str = "work"
    data: Any = None
    options: dict[str, Any] = field(default_factory=dict)

    def request(self) -> JobRequest:
        return JobRequest(self.task, self.data, {"id": self.id, **self.options})


class Producer:
    """Enqueues with explicit ids and writes every acknowledgement to the ledger."""

    def __init__(
        self,
        scene: Scene,
        url: str,
        *,
        queue: str = "chaos",
        aof: Callable[[], int] | None = None,
        client: redis.Redis | None = None,
        min_replicas: int = 0,
    ) -> None:
        self.scene = scene
        durability = {"min_replicas": min_replicas, "replica_timeout": 2.0} if min_replicas else {}
        self.queue = Queue(queue, url=url, client=client, settings=settings(**durability))
        self.aof = aof
        self.acked: set[str] = set()
        # id -> when the acknowledged call was sent: the ledger's time is when the ack was
        # recorded, which a busy machine can push past a fault the call came before
        self.sent_at: dict[str, float] = {}
        self.errors: list[tuple[float, str, float]] = []  # (when, error type, call seconds)
        self.unsure = 0

    def close(self) -> None:
        self.queue.close()

    def send(self, jobs: Sequence[Enqueue]) -> bool:
        """One enqueue call for `jobs`; True when Redis acknowledged it."""
        started = time.monotonic()
        try:
            if len(jobs) == 1:
                j = jobs[0]
                self.queue.enqueue(j.task, j.data, id=j.id, **j.options)
            else:
                self.queue.enqueue_many([j.request() for j in jobs])
        except ConnectionLostError as exc:
            took = time.monotonic() - started
            self.errors.append((started, type(exc).__name__, took))
            if isinstance(exc, UncertainWriteError):
                self.unsure += len(jobs)
                self.scene.ledger.record_many("unsure", [j.id for j in jobs])
            return False
        size = self.aof() if self.aof is not None else ""
        self.scene.ledger.record_many("enq", [j.id for j in jobs], size)
        self.acked.update(j.id for j in jobs)
        self.sent_at.update((j.id, started) for j in jobs)
        return True

    def send_until_acked(self, jobs: Sequence[Enqueue], timeout: float) -> bool:
        """Re-send (same ids: safe) until acknowledged or `timeout` s pass."""
        deadline = time.monotonic() + timeout
        for _ in range(int(timeout / 0.05) + 1):
            if self.send(jobs):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return False

    def stream(
        self,
        jobs: Sequence[Enqueue],
        *,
        seconds: float,
        batch: int = 10,
        stop: Callable[[], bool] = lambda: False,
        retry_for: float = 60.0,
    ) -> None:
        """Enqueue `jobs` in batches spread evenly over `seconds` (each batch retried until
        acknowledged, for at most `retry_for` s)."""
        batches = [jobs[i : i + batch] for i in range(0, len(jobs), batch)]
        if not batches:
            return
        gap = seconds / len(batches)
        start = time.monotonic()
        for n, chunk in enumerate(batches):
            if stop():
                return
            pause = start + n * gap - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            self.send_until_acked(chunk, retry_for)


# --------------------------------------------------------------------------- the scene


class Scene:
    """Everything one scenario runs: its directory, ledger, servers and workers."""

    def __init__(self, base_dir: Path, *, binary: str | None = None, seed: int | None = None):
        self.dir = Path(base_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.scratch = self.dir / "scratch"
        self.scratch.mkdir(exist_ok=True)
        self.ledger_path = self.dir / "ledger.tsv"
        self.ledger = Ledger(self.ledger_path)
        self.binary = binary or find_redis_server()
        self.seed = seed if seed is not None else random.randrange(2**32)
        self.rng = random.Random(self.seed)
        self.servers: list[RedisProcess] = []
        self.pools: list[WorkerPool] = []
        self.producers: list[Producer] = []
        self._sock_dir: Path | None = None

    def socket_path(self, name: str) -> Path:
        """A short unix socket path (sun_path is ~107 bytes; pytest tmp dirs are long)."""
        if self._sock_dir is None:
            self._sock_dir = Path(tempfile.mkdtemp(prefix="cvchaos-", dir="/tmp"))
        return self._sock_dir / name

    def server(
        self,
        *,
        name: str | None = None,
        appendonly: bool = False,
        appendfsync: str = "everysec",
        extra_args: Sequence[str] = (),
        port: int | None = None,
        unixsocket: Path | None = None,
        binary: str | None = None,
        start: bool = True,
    ) -> RedisProcess:
        name = name or f"redis-{len(self.servers)}"
        server = RedisProcess(
            binary=binary or self.binary,
            data_dir=self.dir / name,
            appendonly=appendonly,
            appendfsync=appendfsync,
            port=port,
            unixsocket=unixsocket,
            extra_args=list(extra_args),
        )
        self.servers.append(server)
        return server.start() if start else server

    def workers(self, url: str, count: int, **kwargs: Any) -> WorkerPool:
        pool = WorkerPool(self, url, count=count, **kwargs)
        self.pools.append(pool)
        return pool

    def producer(self, url: str, **kwargs: Any) -> Producer:
        producer = Producer(self, url, **kwargs)
        self.producers.append(producer)
        return producer

    def logs(self) -> str:
        return "\n".join(pool.logs() for pool in self.pools)

    def close(self) -> None:
        for pool in self.pools:
            with contextlib.suppress(Exception):
                pool.stop(timeout=10)
        for producer in self.producers:
            with contextlib.suppress(Exception):
                producer.close()
        for server in self.servers:
            with contextlib.suppress(Exception):
                server.stop(timeout=5)
        self.ledger.close()
        if self._sock_dir is not None:
            shutil.rmtree(self._sock_dir, ignore_errors=True)

    def __enter__(self) -> Scene:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------- Redis helpers


def aof_incr_file(server: RedisProcess) -> Path | None:
    """The AOF file Redis appends to: the newest *.incr.aof (7.x) or appendonly.aof (6.x)."""
    d = server.data_dir / "appendonlydir"
    if d.is_dir():
        files = sorted(d.glob("*.incr.aof"), key=lambda p: p.stat().st_mtime)
        return files[-1] if files else None
    single = server.data_dir / "appendonly.aof"
    return single if single.exists() else None


def file_size(path: Path | None) -> int:
    if path is None:
        return -1
    try:
        return path.stat().st_size
    except OSError:
        return -1


def drained(client: redis.Redis, queue: str, expected: int) -> Callable[[], bool]:
    """A predicate: every one of `expected` jobs finished (completed or failed)."""
    keys = QueueKeys("conveyor", queue)

    def check() -> bool:
        try:
            pipe = client.pipeline(transaction=False)
            for key in (keys.completed, keys.failed, keys.ready, keys.scheduled, keys.active):
                pipe.zcard(key)
            done, failed, ready, scheduled, active = pipe.execute()
        except redis.RedisError:
            return False
        return done + failed >= expected and not (ready or scheduled or active)

    return check


def idle(client: redis.Redis, queue: str) -> Callable[[], bool]:
    """A predicate: nothing waiting, delayed or running in the queue."""
    keys = QueueKeys("conveyor", queue)

    def check() -> bool:
        try:
            pipe = client.pipeline(transaction=False)
            for key in (keys.ready, keys.scheduled, keys.active):
                pipe.zcard(key)
            return not any(pipe.execute())
        except redis.RedisError:
            return False

    return check

"""Execution figures (issue 17), beside the peers where the peers' venv is there:

    python -m bench.execution [--n 2000] [--timeouts 30] [--mix 1500] [--out DIR]

- cpu: jobs of about 5 ms of pure Python, 2 worker processes (Conveyor's process
  execution, Celery's prefork pool, Dramatiq's processes) against the same work in a plain
  loop (1 process, and 2 processes of multiprocessing.Pool) -- jobs/s from the first job's
  start to the last one's;
- timeout: jobs that hang, with timeout=0.5 s and one child: from the deadline to the
  `failed` record, and to the next job running in the replaced child (p50, p99);
- auto: a CPU/IO mix (a quarter 5 ms CPU jobs in children, the rest 50 ms of asyncio
  sleep) drained with fixed concurrencies and with --concurrency auto; a plot of the auto
  worker's concurrency and CPU over time (when matplotlib is there).

Every figure on a shared or loaded machine is indicative only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import redis

from bench.execution_tasks import cpu_job
from bench.systems import PEER_VENV, ROOT
from conveyor.client.sync import Queue
from conveyor.errors import JobFailedError
from conveyor.integrations.redis_server import RedisProcess

TARGET_S = 0.005


def calibrate() -> int:
    """The loop count of one ~5 ms job here."""
    loops = 20_000
    for _ in range(5):
        t0 = time.perf_counter()
        cpu_job(loops)
        took = time.perf_counter() - t0
        loops = max(1000, int(loops * TARGET_S / max(took, 1e-6)))
    return loops


def _plain(n: int, loops: int) -> dict[str, float]:
    t0 = time.perf_counter()
    for _ in range(n):
        cpu_job(loops)
    one = n / (time.perf_counter() - t0)
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        pool.map(cpu_job, [loops] * 8)  # warm
        t0 = time.perf_counter()
        pool.map(cpu_job, [loops] * n, chunksize=16)
        two = n / (time.perf_counter() - t0)
    return {"plain_1proc_jobs_per_s": one, "plain_2proc_jobs_per_s": two}


class Marks:
    """bench.mark's keys on the mark database: how many started, first and last start."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.client.flushdb()

    def done(self) -> int:
        return int(self.client.get("bench:done") or 0)

    def span(self) -> float:
        first = [float(v) for v in self.client.hvals("bench:first")]
        last = [float(v) for v in self.client.hvals("bench:last")]
        return max(last) - min(first)

    def wait(self, n: int, limit: float) -> bool:
        deadline = time.monotonic() + limit
        while self.done() < n and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.done() >= n


def _env(url: str, mark_url: str, loops: int, *, peers: bool = False) -> dict[str, str]:
    path = str(ROOT) if peers else f"{ROOT}{os.pathsep}{ROOT / 'src'}"
    return {
        **os.environ,
        "PYTHONPATH": path,
        "BENCH_REDIS_URL": url,
        "BENCH_MARK_URL": mark_url,
        "BENCH_CPU_LOOPS": str(loops),
    }


def _drain(
    command: list[str], env: dict[str, str], marks: Marks, n: int, fill: Callable[[], None]
) -> dict[str, Any]:
    fill()
    worker = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        ok = marks.wait(n, 300)
        return {"jobs_per_s": (n - 1) / marks.span() if ok else None, "drained": ok}
    finally:
        worker.terminate()
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            worker.kill()


def _cpu(url: str, mark_url: str, n: int, loops: int) -> dict[str, Any]:
    env = _env(url, mark_url, loops)
    out: dict[str, Any] = {"loops_per_job": loops, **_plain(n, loops)}
    marks = Marks(mark_url)
    conveyor = [sys.executable, "-m", "conveyor.integrations.cli", "worker"]
    with Queue("bench-exec", url=url) as queue:
        out["conveyor"] = _drain(
            [*conveyor, "bench.execution_tasks:tasks", "--url", url, "-c", "4", "--processes", "2"],
            env, marks, n, lambda: queue.enqueue_many([("cpu", None)] * n),
        )  # fmt: skip
    peer = PEER_VENV / "bin"
    if not (peer / "celery").exists():
        out["peers"] = f"not run: {PEER_VENV} is missing (`make bench` installs it)"
        return out
    env = _env(url, mark_url, loops, peers=True)
    redis.Redis.from_url(url).flushdb()
    marks = Marks(mark_url)
    send = [str(peer / "python"), "-c", (
        "from bench.execution_tasks import celery_cpu as t\n"
        f"[t.delay(None) for _ in range({n})]"
    )]  # fmt: skip
    out["celery_prefork"] = _drain(
        [str(peer / "celery"), "-A", "bench.execution_tasks", "worker", "-P", "prefork",
         "-c", "2", "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "warning"],
        env, marks, n, lambda: subprocess.run(send, cwd=ROOT, env=env, check=True),
    )  # fmt: skip
    redis.Redis.from_url(url).flushdb()
    marks = Marks(mark_url)
    send = [str(peer / "python"), "-c", (
        "from bench.execution_tasks import dramatiq_cpu as t\n"
        f"[t.send(None) for _ in range({n})]"
    )]  # fmt: skip
    out["dramatiq_processes"] = _drain(
        [str(peer / "dramatiq"), "bench.execution_tasks", "--processes", "2", "--threads", "1"],
        env, marks, n, lambda: subprocess.run(send, cwd=ROOT, env=env, check=True),
    )  # fmt: skip
    return out


def _timeouts(url: str, mark_url: str, count: int) -> dict[str, Any]:
    """Hanging jobs one after another on one child: deadline -> failed record, and
    deadline -> the next job running in the replaced child."""
    redis.Redis.from_url(url).flushdb()
    marks = Marks(mark_url)
    env = _env(url, mark_url, 1000)
    timeout = 0.5
    with Queue("bench-exec", url=url) as queue:
        jobs = [queue.enqueue("hangs", time.time(), timeout=timeout) for _ in range(count)]
        command = [sys.executable, "-m", "conveyor.integrations.cli", "worker",
                   "bench.execution_tasks:tasks", "--url", url,
                   "-c", "1", "--processes", "1"]  # fmt: skip
        worker = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        try:
            for job in jobs:
                with contextlib.suppress(JobFailedError):  # the point
                    queue.wait_result(job.id, timeout=60)
        finally:
            worker.terminate()
            worker.wait(20)
        records = [queue.get(j.id) for j in jobs]
    # each job's data is its enqueue time, which bench.mark pairs with its start in the child
    started = {}
    for pair in marks.client.lrange("bench:lat", 0, -1):
        t0, start = pair.split()
        started[round(float(t0), 6)] = float(start)
    ordered = sorted(started.values())
    to_failed, to_next = [], []
    for record in records:
        start = None if record is None else started.get(round(float(record.data), 6))
        if record is None or record.finished_at is None or start is None:
            continue
        deadline = start + timeout
        to_failed.append(record.finished_at.timestamp() - deadline)
        later = [s for s in ordered if s > start]
        if later:
            to_next.append(later[0] - deadline)
    errors = {(r.error or "").split(":")[0] for r in records if r is not None}
    return {"jobs": count, "errors": sorted(errors), **_pcts("timeout_to_failed_s", to_failed),
            **_pcts("timeout_to_next_job_in_new_child_s", to_next)}  # fmt: skip


def _pcts(name: str, values: list[float]) -> dict[str, Any]:
    if not values:
        return {name: None}
    values = sorted(values)
    p99 = values[min(len(values) - 1, int(round(0.99 * (len(values) - 1))))]
    return {f"{name}_p50": statistics.median(values), f"{name}_p99": p99}


def _mix(url: str, mark_url: str, n: int, loops: int, settings: list[str]) -> dict[str, Any]:
    """The CPU/IO mix drained by one worker per setting; the auto one's trace."""
    env = _env(url, mark_url, loops)
    out: dict[str, Any] = {}
    for setting in settings:
        redis.Redis.from_url(url).flushdb()
        marks = Marks(mark_url)
        auto = setting == "auto"
        with Queue("bench-exec", url=url) as queue:
            queue.enqueue_many([("cpu" if i % 4 == 0 else "io", None) for i in range(n)])
        command = [sys.executable, "-m", "conveyor.integrations.cli", *(["-v"] if auto else []),
                   "worker", "bench.execution_tasks:tasks", "--url", url, "--processes", "2",
                   "-c", setting, *(["--min", "1", "--max", "16"] if auto else [])]  # fmt: skip
        log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)  # noqa: SIM115
        worker = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log,
                                  start_new_session=True)  # fmt: skip
        trace = []
        t0 = time.monotonic()
        started_wall = time.time()
        probe = psutil.Process(worker.pid)
        while marks.done() < n and time.monotonic() - t0 < 300:
            time.sleep(0.5)
            try:
                own = probe.cpu_percent() + sum(
                    c.cpu_percent() for c in probe.children(recursive=True)
                )
            except psutil.Error:
                own = 0.0
            trace.append((time.monotonic() - t0, psutil.cpu_percent(), own))
        worker.terminate()
        worker.wait(20)
        span = marks.span() if marks.done() >= n else None
        out[setting] = {"jobs_per_s": (n - 1) / span if span else None}
        if setting == "auto":
            log.seek(0)
            out[setting]["limit_at"] = _limit_changes(log.read())
            out[setting]["started_wall"] = started_wall
            out[setting]["cpu_trace"] = trace
        os.unlink(log.name)
    return out


def _limit_changes(log: str) -> list[tuple[float, int]]:
    """(epoch s, new limit) from the auto worker's `concurrency a -> b` log lines."""
    found = []
    for m in re.finditer(r"^(\S+ \S+) .*concurrency (\d+) -> (\d+)", log, re.MULTILINE):
        at = time.mktime(time.strptime(m.group(1).split(",")[0], "%Y-%m-%d %H:%M:%S"))
        found.append((at + int(m.group(1).split(",")[1]) / 1000, int(m.group(3))))
    return found


def _plot(json_path: Path, png_path: Path) -> str:
    """The auto worker's concurrency and CPU over time, drawn by bench/execution_plot.py
    with matplotlib: from this venv, else from the peers' (it has matplotlib)."""
    for python in (sys.executable, str(PEER_VENV / "bin" / "python")):
        done = subprocess.run(
            [python, "-m", "bench.execution_plot", str(json_path), str(png_path)],
            cwd=ROOT, capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode == 0:
            return str(png_path)
    return f"no plot: {done.stderr.strip().splitlines()[-1] if done.stderr else 'failed'}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.execution", description=__doc__)
    parser.add_argument("--n", type=int, default=2000, help="cpu jobs")
    parser.add_argument("--timeouts", type=int, default=30, help="hanging jobs")
    parser.add_argument("--mix", type=int, default=1500, help="jobs of the CPU/IO mix")
    parser.add_argument("--fixed", default="1,2,4,8,16", help="fixed concurrencies of the mix")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    loops = calibrate()
    with tempfile.TemporaryDirectory() as work:
        server = RedisProcess(data_dir=Path(work) / "redis").start()
        try:
            url, mark_url = server.url, server.url.rsplit("/", 1)[0] + "/1"
            result = {
                "note": "indicative only: a shared, loaded machine",
                "cpus": os.cpu_count(),
                "cpu": _cpu(url, mark_url, args.n, loops),
                "timeout": _timeouts(url, mark_url, args.timeouts),
                "auto": _mix(url, mark_url, args.mix, loops, [*args.fixed.split(","), "auto"]),
            }
        finally:
            server.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "execution.json").write_text(json.dumps(result, indent=1))
    result["plot"] = _plot(args.out / "execution.json", args.out / "execution.png")
    brief = {k: v for k, v in result.items() if k != "auto"}
    brief["auto"] = {k: v["jobs_per_s"] for k, v in result["auto"].items()}
    print(json.dumps(brief, indent=1))


if __name__ == "__main__":
    main()

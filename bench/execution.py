"""Execution figures, beside the peers where the peers' venv is there:

    python -m bench.execution [--reps 3] [--n 2000] [--timeouts 30] [--mix-seconds 30]
                              [--fixed 1,2,4,8,16,32,64] [--loads cpu,io,mixed]
                              [--parts cpu,timeout,auto] [--out DIR]

- cpu: jobs of about 5 ms of pure Python, 2 worker processes (Conveyor's process
  execution, Celery's prefork pool, Dramatiq's processes) against the same work in a plain
  loop (1 process, and 2 processes of multiprocessing.Pool, run right before and right after
  Conveyor's run: each rep's ratio is against the mean of those two) -- jobs/s from the first
  job's start to the last one's;
- timeout: jobs that hang, with timeout=0.5 s and one child: from the deadline to the
  `failed` record, and to the next job running in the replaced child (p50, p99);
- auto: three loads, each a backlog that outlasts the run, worked for `--mix-seconds`
  from the first job's start with each fixed concurrency of `--fixed` and with
  --concurrency auto (--max the largest fixed one), 2 child processes: `cpu` (5 ms CPU
  jobs in the children), `io` (50 ms of asyncio sleep), `mixed` (a quarter of cpu, the
  rest io): jobs/s in that window, the auto worker's ramp included, against the best
  fixed concurrency of the same run; a plot of the auto workers' concurrency and CPU
  over time (when matplotlib is there).

cpu and auto run `--reps` times, interleaved; each figure is the median of the reps
(timeout runs once). `targets` says, for each of the issue's targets, the measured
ratio and whether it holds. Every figure on a shared or loaded machine is indicative only.
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

from bench.cost import sessions_cpu
from bench.execution_tasks import cpu_job
from bench.systems import PEER_VENV, ROOT
from conveyor.client.models import JobRequest
from conveyor.client.sync import Queue
from conveyor.errors import JobFailedError
from conveyor.integrations.redis_server import RedisProcess

TARGET_S = 0.005
# A CPU job as `tasks.cpu.enqueue(None)` writes it: with its task's options (max_failures=1),
# as the peers' jobs are sent through their task objects (Celery's delay, Dramatiq's send).
# One enqueued by name carries none, and the worker writes the task's in with a policy call.
CPU_JOB = JobRequest("cpu", None, {"max_failures": 1})


def calibrate() -> int:
    """The loop count of one job of about 5 ms of CPU here: the median of five
    jobs' CPU time, not one job's wall time, which another process taking the
    core meanwhile stretched (one calibration gave jobs of 3.4 ms of CPU), after
    half a second of the same work: a core that was idle runs it slower at first
    (75 ns a loop, then 53 here), which made the jobs a third short."""
    warm_until = time.process_time() + 0.5
    while time.process_time() < warm_until:
        cpu_job(20_000)
    loops = 20_000
    for _ in range(5):
        took = []
        for _ in range(5):
            t0 = time.process_time()
            cpu_job(loops)
            took.append(time.process_time() - t0)
        loops = max(1000, int(loops * TARGET_S / max(statistics.median(took), 1e-6)))
    return loops


def _plain(n: int, loops: int) -> dict[str, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        cpu_job(loops)
    one = n / (time.perf_counter() - t0)
    cpu_ms = (time.process_time() - c0) / n * 1000
    return {"plain_1proc_jobs_per_s": one, "plain_2proc_jobs_per_s": _plain_2proc(n, loops),
            "plain_cpu_ms": cpu_ms}  # fmt: skip


def _plain_2proc(n: int, loops: int) -> float:
    """Jobs/s of the same work in a 2-process multiprocessing.Pool, warmed first."""
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        pool.map(cpu_job, [loops] * 8)  # warm
        t0 = time.perf_counter()
        pool.map(cpu_job, [loops] * n, chunksize=16)
        return n / (time.perf_counter() - t0)


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
        # the marker's thread flushes every 50 ms, not 5: each flush takes the GIL from the job
        # and wakes the mark server, which cost every system's 5 ms jobs about a tenth of their
        # throughput, a cost the plain loop does not pay (bench/README.md, "Other benchmarks")
        "BENCH_MARK_FLUSH": "0.05",
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
        # the worker leads its session: its children's CPU counts, ended ones' included
        session = {worker.pid}
        marks.wait(1, 60)
        cpu0, done0 = sessions_cpu(session), marks.done()  # from the first job: no start-up
        ok = marks.wait(n, 300)
        cpu_ms = (sessions_cpu(session) - cpu0) / max(1, marks.done() - done0) * 1000
        return {
            "jobs_per_s": (n - 1) / marks.span() if ok else None,
            "drained": ok,
            "cpu_ms_per_job": cpu_ms,  # the worker's and its children's, all processes
        }
    finally:
        worker.terminate()
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            worker.kill()


def _cpu(url: str, mark_url: str, n: int, loops: int) -> dict[str, Any]:
    env = _env(url, mark_url, loops)
    out: dict[str, Any] = {"loops_per_job": loops, **_plain(n, loops)}
    redis.Redis.from_url(url).flushdb()  # the previous rep's mix left its backlog
    marks = Marks(mark_url)
    conveyor = [sys.executable, "-m", "conveyor.integrations.cli", "worker"]
    with Queue("bench-exec", url=url) as queue:
        # -c: four times --processes, as the README tells users (at twice, a child often
        # finishes before its next job is claimed: a slot frees only once its outcome is written)
        out["conveyor"] = _drain(
            [*conveyor, "bench.execution_tasks:tasks", "--url", url, "-c", "8", "--processes", "2"],
            env, marks, n, lambda: queue.enqueue_many([CPU_JOB] * n),
        )  # fmt: skip
    # The plain pool again, right after: the host's speed drifts by a fifth between runs
    # here, so the rep's ratio is Conveyor's against the mean of the runs on either side.
    out["plain_2proc_after_jobs_per_s"] = _plain_2proc(n, loops)
    ours = out["conveyor"]["jobs_per_s"]
    plain = (out["plain_2proc_jobs_per_s"] + out["plain_2proc_after_jobs_per_s"]) / 2
    out["conveyor_vs_plain_2proc"] = None if ours is None else ours / plain
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
        # the worker counts the timeout from the moment the child begins the job (after it
        # imported the handler's module), a few microseconds before the handler's mark: before
        # it counted from the hand-off to a fresh child, and this came out negative
        deadline = start + timeout
        to_failed.append(record.finished_at.timestamp() - deadline)  # Redis's clock, same host
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


# The jobs of each load of the auto part, by their index in the backlog.
LOADS: dict[str, Callable[[int], str]] = {
    "cpu": lambda i: "cpu",
    "io": lambda i: "io",
    "mixed": lambda i: "cpu" if i % 4 == 0 else "io",
}


CLI = "conveyor.integrations.cli"
# The auto worker logs its limit changes (INFO, -v) but no line per job, which the fixed
# ones do not write either: `conveyor.jobs` stays at WARNING.
QUIET_JOBS = (
    "import logging; logging.getLogger('conveyor.jobs').setLevel(logging.WARNING); "
    f"from {CLI} import main; main()"
)


def _loads(
    url: str, mark_url: str, seconds: float, loops: int, settings: list[str], loads: list[str]
) -> dict[str, Any]:
    """Each load worked by one worker per setting for `seconds`; the auto ones' traces."""
    most = max(int(s) for s in settings if s != "auto")
    return {
        load: {s: _window(url, mark_url, seconds, loops, load, s, most) for s in settings}
        for load in loads
    }


def _window(
    url: str, mark_url: str, seconds: float, loops: int, load: str, setting: str, most: int
) -> dict[str, Any]:
    """One worker at one setting on a backlog of `load`: jobs/s over `seconds` from
    its first job's start (with auto: its limit changes and CPU trace)."""
    env = _env(url, mark_url, loops)
    backlog = int(seconds * 2500)  # more than any setting here gets through
    redis.Redis.from_url(url).flushdb()
    marks = Marks(mark_url)
    auto = setting == "auto"
    with Queue("bench-exec", url=url) as queue:
        queue.enqueue_many([(LOADS[load](i), None) for i in range(backlog)])
    cli = [sys.executable, "-c", QUIET_JOBS, "-v"] if auto else [sys.executable, "-m", CLI]
    command = [*cli, "worker", "bench.execution_tasks:tasks", "--url", url, "--processes", "2",
               "-c", setting,
               *(["--min", "1", "--max", str(most)] if auto else [])]  # fmt: skip
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)  # noqa: SIM115
    worker = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log,
                              start_new_session=True)  # fmt: skip
    trace = []
    t0 = time.monotonic()
    started_wall = time.time()
    probe = psutil.Process(worker.pid)
    known: dict[int, psutil.Process] = {}  # a new Process object's first read is 0
    while marks.done() < 1 and time.monotonic() - t0 < 60:
        time.sleep(0.01)
    first, first_done = time.monotonic(), marks.done()
    while time.monotonic() - first < seconds:
        time.sleep(0.5)
        try:
            own = probe.cpu_percent()
            for child in probe.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    own += known.setdefault(child.pid, child).cpu_percent()
        except psutil.Error:
            own = 0.0
        trace.append((time.monotonic() - t0, psutil.cpu_percent(), own))
    done, took = marks.done() - first_done, time.monotonic() - first
    worker.terminate()
    worker.wait(20)
    out: dict[str, Any] = {"jobs_per_s": done / took if done < backlog else None}
    if auto:
        log.seek(0)
        out["limit_at"] = _limit_changes(log.read())
        out["started_wall"] = started_wall
        out["cpu_trace"] = trace
    log.close()
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


# The auto worker's trace of one rep: its limit changes and CPU readings, timed from its start.
_TRACE = ("cpu_trace", "limit_at", "started_wall")


def _median(runs: list[Any]) -> Any:
    """The median of the reps' figures, key by key (None where a rep has none); the auto
    trace is the first rep's, whole (a median of start times would misplace it)."""
    first = runs[0]
    if isinstance(first, dict):
        return {k: _median([r.get(k) for r in runs]) for k in first if k not in _TRACE} | {
            k: first[k] for k in _TRACE if k in first
        }
    numbers = [r for r in runs if isinstance(r, int | float) and not isinstance(r, bool)]
    if len(numbers) == len(runs):
        return statistics.median(numbers)
    return first


def targets(result: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets against the medians: each ratio, its goal, and whether it holds."""
    out: dict[str, Any] = {}
    cpu = result.get("cpu")
    if cpu:
        ours = (cpu.get("conveyor") or {}).get("jobs_per_s")
        ratio = cpu.get("conveyor_vs_plain_2proc")  # the median of the reps' own ratios
        if ratio:
            per_rep = [r.get("conveyor_vs_plain_2proc") for r in result.get("cpu_runs", [])]
            rounded = [r and round(r, 3) for r in per_rep]
            out["cpu_vs_plain_2proc"] = {**_goal(ratio, ">=", 0.8), "per_rep": rounded}
        cost = (cpu.get("conveyor") or {}).get("cpu_ms_per_job")
        if cost and cpu.get("plain_cpu_ms"):
            # less sensitive to other load than jobs/s: the share of the CPU it takes that
            # goes to the work itself (a bound on jobs/s against 2 cores of a plain loop)
            out["cpu_work_share"] = _goal(cpu["plain_cpu_ms"] / cost, ">=", 0.8)
        for peer in ("celery_prefork", "dramatiq_processes"):
            theirs = (cpu.get(peer) or {}).get("jobs_per_s")
            if ours and theirs:
                out[f"cpu_vs_{peer}"] = _goal(ours / theirs, ">=", 1.0)
    timeout = result.get("timeout")
    if timeout:
        for name in ("timeout_to_failed_s_p99", "timeout_to_next_job_in_new_child_s_p99"):
            if timeout.get(name) is not None:
                out[name] = _goal(timeout[name], "<", 1.0)
    for load, runs in (result.get("auto") or {}).items():
        auto = (runs.get("auto") or {}).get("jobs_per_s")
        fixed = {k: v["jobs_per_s"] for k, v in runs.items() if k != "auto" and v["jobs_per_s"]}
        if auto and fixed:
            best = max(fixed, key=lambda k: fixed[k])
            ratio = _goal(auto / fixed[best], ">=", 0.9)
            out[f"auto_vs_best_fixed_{load}"] = {"best": best, **ratio}
    return out


def _goal(value: float, op: str, goal: float) -> dict[str, Any]:
    holds = value >= goal if op == ">=" else value < goal
    return {"value": round(value, 3), "goal": f"{op} {goal}", "holds": holds}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.execution", description=__doc__)
    parser.add_argument("--reps", type=int, default=3, help="reps of cpu and auto (median)")
    parser.add_argument("--n", type=int, default=2000, help="cpu jobs")
    parser.add_argument("--timeouts", type=int, default=30, help="hanging jobs")
    parser.add_argument("--mix-seconds", type=float, default=30.0, help="each mix run's window")
    parser.add_argument("--fixed", default="1,2,4,8,16,32,64", help="the mix's fixed concurrencies")
    parser.add_argument("--loads", default="cpu,io,mixed", help="the auto part's loads")
    parser.add_argument("--parts", default="cpu,timeout,auto", help="which parts to run")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    fixed = args.fixed.split(",")
    loops = calibrate()
    started = time.time()
    runs: dict[str, list[Any]] = {"cpu": [], "auto": []}
    with tempfile.TemporaryDirectory() as work:
        server = RedisProcess(data_dir=Path(work) / "redis").start()
        try:
            url, mark_url = server.url, server.url.rsplit("/", 1)[0] + "/1"
            result: dict[str, Any] = {
                "note": "indicative only: a shared 2-core machine (see load_average)",
                "cpus": os.cpu_count(),
                "reps": args.reps,
            }
            for _ in range(args.reps):
                if "cpu" in parts:
                    runs["cpu"].append(_cpu(url, mark_url, args.n, loops))
                if "auto" in parts:
                    loads = args.loads.split(",")
                    runs["auto"].append(
                        _loads(url, mark_url, args.mix_seconds, loops, [*fixed, "auto"], loads)
                    )
            if "timeout" in parts:
                result["timeout"] = _timeouts(url, mark_url, args.timeouts)
        finally:
            server.stop()
    for part, reps in runs.items():
        if reps:
            result[part] = _median(reps)
            result[f"{part}_runs"] = [_brief(part, r) for r in reps]
    result["targets"] = targets(result)
    result["seconds"] = round(time.time() - started)
    result["load_average_at_end"] = os.getloadavg()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "execution.json").write_text(json.dumps(result, indent=1))
    if "auto" in result:
        result["plot"] = _plot(args.out / "execution.json", args.out / "execution.png")
    brief = {k: v for k, v in result.items() if k not in ("auto", "cpu_runs", "auto_runs")}
    if "auto" in result:
        brief["auto"] = _brief("auto", result["auto"])
    print(json.dumps(brief, indent=1))


def _brief(part: str, run: dict[str, Any]) -> dict[str, Any]:
    """A rep without the traces: jobs/s per system, or per load and setting."""
    if part == "auto":
        return {load: {k: v["jobs_per_s"] for k, v in r.items()} for load, r in run.items()}
    return {k: (v["jobs_per_s"] if isinstance(v, dict) else v) for k, v in run.items()}


if __name__ == "__main__":
    main()

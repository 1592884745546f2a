"""Run one scenario of one system, in that system's interpreter, and print its result.

    python -m bench.driver --system huey --scenario process_1proc --n 10000 \\
        --queue-url redis://127.0.0.1:PORT/0 --mark-url redis://127.0.0.1:PORT2/0 ...

The last stdout line is `BENCH-RESULT <json>`. The queue server is the one the
library uses; the mark server only receives the jobs' marks (bench/mark.py) and
the harness's polling, so the queue server's statistics are the library's alone.
Both are private servers of the harness: this process flushes them freely. The
library's clients (producers and workers) use `--client-url`: the queue server
itself, or the delay proxy in front of it in the network scenarios; this process
reads the server's statistics directly.

Redis's work per job is sampled inside the steady window: `INFO cpu` and
`INFO commandstats` when 10% and again when 90% of the jobs are done (processing)
or sent (single enqueue), divided by the jobs between the two samples.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import inspect
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import redis

from bench.cost import cost_per_job, sessions_cpu, window_cost
from bench.stats import percentile
from bench.systems import EQUAL, ROOT, SPECS, subprocess_env
from bench.threads import CompletionWatcher, StartGate

POLL = 0.01
WARM_JOBS = 20
PAYLOAD_100 = "x" * 100
WINDOW = (0.1, 0.9)  # the steady window: from 10% to 90% of the jobs


async def maybe(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class Ctx:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.system: str = args.system
        self.n: int = args.n
        self.spec = SPECS[args.scenario]
        self.queue_url: str = args.queue_url
        self.client_url: str = args.client_url or args.queue_url
        self.mark_url: str = args.mark_url
        self.qr = redis.Redis.from_url(args.queue_url)
        self.mr = redis.Redis.from_url(args.mark_url)
        self.python = Path(sys.executable)
        concurrency = str(EQUAL) if self.spec.c100 else ""
        self.env = subprocess_env(self.client_url, args.mark_url, self.python, concurrency)
        os.environ.update(
            {k: self.env[k] for k in ("BENCH_REDIS_URL", "BENCH_MARK_URL", "BENCH_CONCURRENCY")}
        )
        self.logdir = Path(args.logdir)
        self.workers: list[tuple[subprocess.Popen[bytes], Path]] = []
        self.adapter: ModuleType | None = None

    def load(self) -> ModuleType:
        if self.adapter is None:
            self.adapter = importlib.import_module(self.args.module)
        return self.adapter

    def flush(self) -> None:
        self.qr.flushall()
        self.mr.flushall()

    # --- workers -------------------------------------------------------------

    def spawn(self, tag: str) -> None:
        cmd = self.load().worker_command(str(self.python))
        log = self.logdir / f"{self.system}-{self.args.scenario}-{tag}-{os.getpid()}.log"
        with open(log, "wb") as out:
            out.write(("$ " + " ".join(cmd) + "\n").encode())
            out.flush()
            proc = subprocess.Popen(
                cmd,
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if self.args.pidfile:
            with open(self.args.pidfile, "a") as f:
                f.write(f"{proc.pid}\n")
        self.workers.append((proc, log))

    def stop_workers(self) -> None:
        for proc, _ in self.workers:
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc, _ in self.workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
            _signal_group(proc.pid, signal.SIGKILL)  # children left behind (dramatiq, taskiq)
            proc.wait()
        self.workers = []

    def log_tail(self) -> str:
        parts = []
        for _, log in self.workers:
            lines = log.read_text("utf-8", "replace").splitlines()[-15:]
            parts.append(f"--- {log.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    def wait_done(
        self, target: int, timeout: float, samples: list[tuple[int, dict[str, Any]]] | None = None
    ) -> float:
        """Poll the mark server until `target` jobs ran; the time seen. With `samples`,
        take the queue server's statistics when 10% and when 90% of `target` are done."""
        deadline = time.monotonic() + timeout
        marks = [int(target * f) for f in WINDOW] if samples is not None else []
        while True:
            done = int(self.mr.get("bench:done") or 0)
            if samples is not None and marks and marks[0] <= done < target:
                samples.append((done, self.server_stats()))
                marks = [m for m in marks[1:] if m > done]
            if done >= target:
                return time.time()
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{done} of {target} jobs ran within {timeout:.0f} s\n{self.log_tail()}"
                )
            if self.workers and all(p.poll() is not None for p, _ in self.workers):
                raise RuntimeError(f"the worker exited; {done} of {target} ran\n{self.log_tail()}")
            time.sleep(POLL)

    # --- the queue server --------------------------------------------------------

    def server_stats(self) -> dict[str, Any]:
        cpu = self.qr.info("cpu")
        commands = self.qr.info("commandstats")
        calls = {
            k.removeprefix("cmdstat_"): int(v["calls"])
            for k, v in commands.items()
            if k != "cmdstat_info"  # the harness's own sampling
        }
        stats = {
            "cpu": float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]),
            "cpu_sys": float(cpu["used_cpu_sys"]),
            "calls": calls,
        }
        if self.workers:  # each worker leads its own session (spawn)
            stats["workers_cpu"] = sessions_cpu({p.pid for p, _ in self.workers})
        return stats


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


# --- scenarios ----------------------------------------------------------------------


async def open_client(ctx: Ctx) -> Any:
    """A fresh client, warmed with one enqueue; both servers flushed after it
    (then `after_flush()`, where the adapter has one, restores what a producer's
    start-up normally leaves in Redis)."""
    ctx.flush()
    client = ctx.load().Client(ctx.client_url)
    await maybe(client.open())
    await maybe(client.enqueue(0.0))
    if hasattr(client, "aenqueue"):
        await client.aenqueue(0.0)
    ctx.flush()
    if hasattr(client, "after_flush"):
        await maybe(client.after_flush())
    return client


async def enqueue_loop(fn: Any, args: list[Any]) -> list[Any]:
    if inspect.iscoroutinefunction(fn):
        return [await fn(a) for a in args]
    return [fn(a) for a in args]


async def fill(client: Any, args: list[Any]) -> None:
    """Put jobs in the queue the fastest way the library has (not timed)."""
    if hasattr(client, "bulk"):
        await maybe(client.bulk(args))
    else:
        await enqueue_loop(client.enqueue, args)


async def enqueue_single(ctx: Ctx, *, use_async: bool = False) -> dict[str, Any]:
    """N single enqueues, timed; the server's statistics sampled between the first 10%
    and the last 10% of them (the sampling's own time is not counted)."""
    client = await open_client(ctx)
    fn = client.aenqueue if use_async else client.enqueue
    cuts = [0, int(ctx.n * WINDOW[0]), int(ctx.n * WINDOW[1]), ctx.n]
    before = ctx.server_stats()
    elapsed = 0.0
    samples = []
    for lo, hi in zip(cuts, cuts[1:], strict=False):
        start = time.perf_counter()
        await enqueue_loop(fn, [0.0] * (hi - lo))
        elapsed += time.perf_counter() - start
        samples.append((hi, ctx.server_stats()))
    await maybe(client.close())
    if ctx.qr.dbsize() == 0:
        raise RuntimeError("nothing reached Redis")
    api = "async" if inspect.iscoroutinefunction(fn) else "sync"
    cost = window_cost(samples[:2], (before, samples[-1][1], ctx.n))
    return {"jobs_per_s": ctx.n / elapsed, "seconds": elapsed, "api": api, **cost}


async def enqueue_single_async(ctx: Ctx) -> dict[str, Any]:
    return await enqueue_single(ctx, use_async=True)


async def enqueue_single_uvloop(ctx: Ctx) -> dict[str, Any]:
    """enqueue_single_async with uvloop's loop (main starts it): for information."""
    loop = type(asyncio.get_running_loop())
    if not loop.__module__.startswith("uvloop"):
        raise RuntimeError(f"expected uvloop's loop, running on {loop.__module__}.{loop.__name__}")
    return await enqueue_single(ctx, use_async=True)


def loop_factory(scenario: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop for enqueue_single_uvloop, else asyncio's default."""
    if scenario != "enqueue_single_uvloop":
        return None
    import uvloop  # in Conveyor's venv through its test extra

    return uvloop.new_event_loop


async def enqueue_bulk(ctx: Ctx) -> dict[str, Any]:
    client = await open_client(ctx)
    if not hasattr(client, "bulk"):
        raise RuntimeError("no bulk API")
    args = [0.0] * ctx.n
    before = ctx.server_stats()
    start = time.perf_counter()
    await maybe(client.bulk(args))
    elapsed = time.perf_counter() - start
    after = ctx.server_stats()
    await maybe(client.close())
    return {
        "jobs_per_s": ctx.n / elapsed,
        "seconds": elapsed,
        "api": ctx.load().BULK,
        **cost_per_job(before, after, ctx.n),
    }


async def process(ctx: Ctx, procs: int) -> dict[str, Any]:
    client = await open_client(ctx)
    await fill(client, [0.0] * ctx.n)
    await maybe(client.close())
    ctx.mr.flushall()
    if int(ctx.qr.dbsize()) == 0:
        raise RuntimeError("the backlog did not reach Redis")
    if ctx.args.after_fill:  # bench/run_ir.py: count the server's instructions from here
        subprocess.run(shlex.split(ctx.args.after_fill), check=True, capture_output=True)
    before = ctx.server_stats()
    samples: list[tuple[int, dict[str, Any]]] = []
    gate = StartGate(ctx, procs) if procs > 1 else None
    spawned = time.time()
    try:
        for i in range(procs):
            ctx.spawn(f"w{i}")
        if gate is not None:
            gate.start()
        all_done = await asyncio.to_thread(ctx.wait_done, ctx.n, ctx.args.timeout, samples)
        after = ctx.server_stats()
        firsts = [float(v) for v in ctx.mr.hvals("bench:first")]
        lasts = [float(v) for v in ctx.mr.hvals("bench:last")]
    finally:
        ctx.stop_workers()
    first, last = min(firsts), max(lasts)
    return {
        "jobs_per_s": ctx.n / max(last - first, 1e-9),
        "seconds": last - first,
        "jobs_per_s_incl_startup": ctx.n / (all_done - spawned),
        "startup_s": first - spawned,
        "worker_processes_that_ran_jobs": len(firsts),
        # the last process's first job after the first's, the first process's last before the last's
        "start_spread_s": max(firsts) - first,
        "end_spread_s": last - min(lasts),
        **(gate.report() if gate is not None else {}),
        "concurrency": ctx.env["BENCH_CONCURRENCY"] or "default",
        **window_cost(samples, (before, after, ctx.n)),
    }


async def latency(ctx: Ctx) -> dict[str, Any]:
    lat_n, rate = ctx.args.lat_n, ctx.args.rate
    client = await open_client(ctx)
    fn = client.enqueue
    is_async = inspect.iscoroutinefunction(fn)
    try:
        ctx.spawn("w0")
        await enqueue_loop(fn, [0.0] * WARM_JOBS)
        await asyncio.to_thread(ctx.wait_done, WARM_JOBS, ctx.args.timeout)
        await asyncio.sleep(1.0)  # idle: the worker is waiting for work
        spec = ctx.load().COMPLETION_STREAM
        watcher = CompletionWatcher(ctx.queue_url, spec) if spec else None
        if watcher:
            watcher.start()
        sent: dict[str, float] = {}
        start = time.perf_counter()
        for i in range(lat_n):
            wait = start + i / rate - time.perf_counter()
            if wait > 0:
                if is_async:
                    await asyncio.sleep(wait)
                else:
                    time.sleep(wait)
            t0 = time.time()
            job_id = await fn(t0) if is_async else fn(t0)
            if job_id is not None:
                sent[str(job_id)] = t0
        sending = time.perf_counter() - start
        await asyncio.to_thread(ctx.wait_done, WARM_JOBS + lat_n, ctx.args.timeout)
        if watcher:
            deadline = time.monotonic() + 5
            while len(watcher.seen) < lat_n and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            watcher.stop.set()
        pairs = [item.split() for item in ctx.mr.lrange("bench:lat", 0, -1)]
    finally:
        ctx.stop_workers()
        await maybe(client.close())
    to_start = sorted((float(s) - float(t0)) * 1000 for t0, s in pairs)
    result: dict[str, Any] = {
        "p50_ms": percentile(to_start, 50),
        "p99_ms": percentile(to_start, 99),
        "max_ms": to_start[-1],
        "samples": len(to_start),
        "sent_per_s": lat_n / sending,
        "complete_p50_ms": None,
        "complete_p99_ms": None,
    }
    if watcher:
        done = sorted((watcher.seen[j] - t0) * 1000 for j, t0 in sent.items() if j in watcher.seen)
        if done:
            result["complete_p50_ms"] = percentile(done, 50)
            result["complete_p99_ms"] = percentile(done, 99)
            result["complete_samples"] = len(done)
    return result


async def redis_memory(ctx: Ctx) -> dict[str, Any]:
    client = await open_client(ctx)
    ctx.qr.execute_command("MEMORY", "PURGE")
    before = int(ctx.qr.info("memory")["used_memory"])
    await fill(client, [PAYLOAD_100] * ctx.n)
    after = int(ctx.qr.info("memory")["used_memory"])
    keys = int(ctx.qr.dbsize())
    await maybe(client.close())
    return {
        "bytes_per_job": (after - before) / ctx.n,
        "keys_per_job": round(keys / ctx.n, 3),
        "per_job_state": bool(ctx.load().PER_JOB_STATE),
    }


async def ceiling(ctx: Ctx) -> dict[str, Any]:
    from bench.ceiling import run_ceiling

    return await asyncio.to_thread(run_ceiling, ctx.queue_url, ctx.args)


async def run_scenario(ctx: Ctx) -> dict[str, Any]:
    kind = ctx.spec.kind
    if kind == "process":
        return await process(ctx, ctx.spec.procs)
    return await KINDS[kind](ctx)  # type: ignore[no-any-return]


KINDS: dict[str, Callable[[Ctx], Any]] = {
    "enqueue_single": enqueue_single,
    "enqueue_single_async": enqueue_single_async,
    "enqueue_single_uvloop": enqueue_single_uvloop,
    "enqueue_bulk": enqueue_bulk,
    "latency": latency,
    "redis_memory": redis_memory,
    "ceiling": ceiling,
}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.driver")
    p.add_argument("--system", required=True)
    p.add_argument("--module", default="")
    p.add_argument("--scenario", required=True, choices=sorted(SPECS))
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--lat-n", type=int, default=1000)
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--ceiling-n", type=int, default=100_000)
    p.add_argument("--claim-count", type=int, default=100)
    p.add_argument("--queue-url", required=True)
    p.add_argument("--mark-url", required=True)
    p.add_argument("--client-url", default="", help="the library's URL (default: --queue-url)")
    p.add_argument("--timeout", type=float, default=180.0)
    p.add_argument("--pidfile", default="")
    p.add_argument("--after-fill", default="", help="process: a command run once the backlog is in")
    p.add_argument("--logdir", required=True)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    ctx = Ctx(args)
    # SIGTERM from the orchestrator (its timeout): stop the workers on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        with asyncio.Runner(loop_factory=loop_factory(args.scenario)) as runner:
            result = runner.run(run_scenario(ctx))
    except Exception as exc:
        traceback.print_exc()
        message = f"{type(exc).__name__}: {exc}".strip()
        result = {"error": message[:2000]}
    finally:
        ctx.stop_workers()
    print("BENCH-RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

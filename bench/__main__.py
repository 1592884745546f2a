"""`make bench`: Conveyor against the peers and Redis's ceiling, on private Redis servers.

    .venv/bin/python -m bench                          # all: 3 reps (9 single-enqueue)
    .venv/bin/python -m bench --quick                  # small N, 1 rep
    .venv/bin/python -m bench --systems conveyor,huey --scenarios process_1proc --reps 5

A full run (every system and scenario at the default sizes) writes bench/results/latest.json,
latest.md and latest.png (see bench/README.md); any other run writes them to
bench/results/partial/ unless --out names a directory, so a partial run never replaces the
official figures.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import report
from bench.netproxy import DelayProxy, round_trip_ms
from bench.systems import (
    MODULES,
    NET,
    PARTIAL,
    PEERS,
    RESULTS,
    ROOT,
    SCENARIOS,
    SYSTEMS,
    plan,
    python_for,
    subprocess_env,
    venv_dir,
    venv_group,
    with_stand_ins,
)
from bench.venv import ensure_venv, versions
from conveyor.integrations.redis_server import RedisProcess, find_redis_server


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=10_000, help="jobs per enqueue/process/memory run")
    p.add_argument("--bulk-n", type=int, default=100_000, help="jobs per enqueue_bulk run")
    p.add_argument("--lat-n", type=int, default=1_000, help="jobs per latency run")
    p.add_argument(
        "--net-n", type=int, default=2_000, help="jobs per network run (latency_net: --lat-n)"
    )
    p.add_argument("--net-delay-ms", type=float, default=1.0, help="the proxy's delay each way")
    p.add_argument("--rate", type=float, default=200.0, help="latency: jobs/s sent")
    p.add_argument("--ceiling-n", type=int, default=50_000, help="redis-benchmark requests")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument(
        "--enqueue-reps", type=int, default=9, help="reps of the single-enqueue scenarios"
    )
    p.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated")
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated")
    p.add_argument("--quick", action="store_true", help="N=2000, bulk 20000, 300 latency jobs")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds for a backlog to drain")
    p.add_argument(
        "--out",
        default=None,
        help="directory for latest.{json,md,png} (default: bench/results for a full run at the "
        "default sizes, bench/results/partial for any other)",
    )
    p.add_argument("--no-install", action="store_true", help="never create/update .venv-bench")
    p.add_argument("--seed", type=int, default=None, help="shuffle seed")
    p.add_argument("--redis-server", default=None, help="redis-server binary (default: PATH)")
    args = p.parse_args(argv)
    if args.quick:
        args.n, args.bulk_n, args.lat_n, args.ceiling_n = 2_000, 20_000, 300, 10_000
        args.net_n = 500
        given = argv or sys.argv
        args.reps = 1 if "--reps" not in given else args.reps
        args.enqueue_reps = 1 if "--enqueue-reps" not in given else args.enqueue_reps
    args.systems = _names(args.systems, SYSTEMS, "system")
    asked = _names(args.scenarios, SCENARIOS, "scenario")
    args.scenarios = with_stand_ins(args.systems, asked)
    for added in (sc for sc in args.scenarios if sc not in asked):
        print(f"bench: adding {added}: it stands in for the thread-pool peers at c100")
    if args.out is None:
        args.out = str(RESULTS if _is_full_run(p, args) else PARTIAL)
    return args


# What a run must leave at its default to be the official one (bench/results/latest.*).
FULL_RUN_DEFAULTS = ("n", "bulk_n", "lat_n", "net_n", "net_delay_ms", "rate", "ceiling_n",
                     "reps", "enqueue_reps", "quick", "redis_server")  # fmt: skip


def _is_full_run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> bool:
    """Every system and scenario at the default sizes, on the default server."""
    defaults = all(getattr(args, name) == parser.get_default(name) for name in FULL_RUN_DEFAULTS)
    return defaults and set(args.systems) == set(SYSTEMS) and set(args.scenarios) == set(SCENARIOS)


def _names(text: str, known: tuple[str, ...], what: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [x for x in names if x not in known]
    if unknown:
        raise SystemExit(f"unknown {what}(s) {unknown}; known: {', '.join(known)}")
    return names


NET_TIMEOUT_FACTOR = 4


def scenario_n(args: argparse.Namespace, scenario: str) -> int:
    if scenario in ("latency", "latency_net"):
        return int(args.lat_n)
    if scenario in NET:
        return int(args.net_n)
    return int({"enqueue_bulk": args.bulk_n}.get(scenario, args.n))


class Harness:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.pidfile = workdir / "worker-pids"
        self.logdir = workdir / "logs"
        self.logdir.mkdir(parents=True)
        binary = args.redis_server or find_redis_server()
        self.queue_server = RedisProcess(binary=binary, data_dir=workdir / "queue-redis")
        self.mark_server = RedisProcess(binary=binary, data_dir=workdir / "mark-redis")
        self.proxy: DelayProxy | None = None

    def __enter__(self) -> Harness:
        self.queue_server.start()
        self.mark_server.start()
        if any(sc in NET for sc in self.args.scenarios):
            port = int(self.queue_server.url.rsplit(":", 1)[1].split("/")[0])
            self.proxy = DelayProxy(port, self.args.net_delay_ms / 1000).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill_leftovers()
        if self.proxy is not None:
            self.proxy.stop()
        self.queue_server.stop()
        self.mark_server.stop()

    def round_trips_ms(self) -> dict[str, float]:
        """PING round trips to the queue server, direct and through the proxy (median)."""
        out = {"direct": round(round_trip_ms(self.queue_server.url), 3)}
        if self.proxy is not None:
            out["through_the_proxy"] = round(round_trip_ms(self.proxy.url), 3)
        return out

    def kill_leftovers(self) -> None:
        """Worker process groups a driver started and could not stop (it was killed)."""
        if not self.pidfile.exists():
            return
        for line in self.pidfile.read_text().split():
            with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
                os.killpg(int(line), signal.SIGKILL)
        self.pidfile.unlink()

    def run(self, system: str, scenario: str) -> dict[str, Any]:
        a = self.args
        # across the network a peer paying round trips per job drains slowly (rq: about
        # 16 jobs/s at tiny N here), so its backlog gets NET_TIMEOUT_FACTOR times as long
        timeout = a.timeout * (NET_TIMEOUT_FACTOR if scenario in NET else 1)
        python = python_for(system)
        module = MODULES.get(system, "")
        cmd = [
            str(python), "-m", "bench.driver", "--system", system, "--module", module,
            "--scenario", scenario, "--n", str(scenario_n(a, scenario)),
            "--lat-n", str(a.lat_n), "--rate", str(a.rate), "--ceiling-n", str(a.ceiling_n),
            "--queue-url", self.queue_server.url, "--mark-url", self.mark_server.url,
            "--client-url", self.proxy.url if scenario in NET and self.proxy else "",
            "--timeout", str(timeout), "--pidfile", str(self.pidfile),
            "--logdir", str(self.logdir),
        ]  # fmt: skip
        env = subprocess_env(self.queue_server.url, self.mark_server.url, python)
        err = self.logdir / f"driver-{system}-{scenario}.err"
        limit = timeout * 2 + 600
        with open(err, "ab") as stderr:
            proc = subprocess.Popen(
                cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=stderr,
                start_new_session=True,
            )  # fmt: skip
            try:
                out, _ = proc.communicate(timeout=limit)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    out, _ = proc.communicate(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    out, _ = proc.communicate()
                self.kill_leftovers()
                return {"error": f"the driver did not finish within {limit:.0f} s"}
        for line in reversed(out.decode("utf-8", "replace").splitlines()):
            if line.startswith("BENCH-RESULT "):
                result: dict[str, Any] = json.loads(line[len("BENCH-RESULT ") :])
                return result
        tail = err.read_text("utf-8", "replace").splitlines()[-10:]
        return {"error": f"the driver exited with {proc.returncode}: " + " | ".join(tail)}


def source_state() -> dict[str, str]:
    """Which Conveyor was measured: the commit, and a digest of uncommitted changes to src/."""

    def git(*cmd: str) -> str:
        done = subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, check=False)
        return done.stdout.decode("utf-8", "replace").strip()

    diff = git("diff", "HEAD", "--", "src")
    state = {"commit": git("rev-parse", "--short", "HEAD")}
    if diff:
        state["uncommitted_src_diff_sha256"] = hashlib.sha256(diff.encode()).hexdigest()[:12]
    return state


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    systems: list[str] = args.systems
    scenarios: list[str] = args.scenarios
    peers = [s for s in systems if s in PEERS]
    venv_errors = {}
    for group in dict.fromkeys(g for g in map(venv_group, peers) if g is not None):
        venv_errors[group] = ensure_venv(group, install=not args.no_install)
        if venv_errors[group]:
            print(f"{venv_dir(group).name} unusable: {venv_errors[group]}", file=sys.stderr)
    rng = random.Random(args.seed)
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    started = time.time()
    source_at_start = source_state()
    workdir = Path(tempfile.mkdtemp(prefix="conveyor-bench-"))
    print(f"bench: work dir {workdir}; systems {systems}; scenarios {scenarios}", flush=True)
    with Harness(args, workdir) as harness:
        print(f"bench: queue Redis {harness.queue_server.url}, marks {harness.mark_server.url}")
        round_trips = harness.round_trips_ms()
        print(f"bench: PING round trips (ms): {round_trips}", flush=True)
        for rep, scenario, system in plan(systems, scenarios, args.reps, args.enqueue_reps, rng):
            t = time.monotonic()
            group = venv_group(system)
            if group is not None and venv_errors.get(group):
                result = {"error": f"{venv_dir(group).name} unusable: {venv_errors[group]}"}
            else:
                result = harness.run(system, scenario)
            result["rep"] = rep
            runs.setdefault((system, scenario), []).append(result)
            print(
                f"rep {rep + 1} {scenario:<21} {system:<9} "
                f"{report.brief(result)}  ({time.monotonic() - t:.1f} s)",
                flush=True,
            )
    meta = {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "duration_s": round(time.time() - started, 1),
        "reps": args.reps,
        "enqueue_reps": args.enqueue_reps,
        "n": args.n,
        "bulk_n": args.bulk_n,
        "lat_n": args.lat_n,
        "net_n": args.net_n,
        "net_delay_ms_each_way": args.net_delay_ms,
        "ping_round_trip_ms": round_trips,
        "rate": args.rate,
        "ceiling_n": args.ceiling_n,
        "cpus": os.cpu_count(),
        "load_average_at_end": list(os.getloadavg()),
        "python": sys.version.split()[0],
        "versions": versions(
            {g: e is None for g, e in venv_errors.items()},
            args.redis_server or find_redis_server(),
        ),
        "conveyor_source": {"at_start": source_at_start, "at_end": source_state()},
        "peer_venvs": {s: venv_dir(g).name for s in peers if (g := venv_group(s))},
        "work_dir": str(workdir),
    }
    out = Path(args.out)
    paths = report.write(out, runs, systems, scenarios, meta)
    print(Path(paths["md"]).read_text())
    print("bench: wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

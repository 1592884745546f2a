"""Redis instructions (callgrind Ir) per processed job in a whole worker run.

    .venv/bin/python -m bench.run_ir [--src DIR] [--scenario process_1proc_c100] [--n 5000]

A private `redis-server` runs under `valgrind --tool=callgrind --instr-atstart=no`
(script_ir.Server). `bench.driver` fills the queue, then switches instrumentation on
(`--after-fill`), starts the worker from the CLI and waits for the backlog to drain: the
figure is the whole server's Ir from the first claim to the last completion (the worker's
heartbeats, pops and round trips included), divided by the jobs. Every script is loaded
before the run, so the worker's first `EVALSHA`s find them (a `SCRIPT LOAD` inside the
window would add about 4k per job at 5,000 jobs). `--src` runs the worker and the scripts
of another tree (its `src/` on `PYTHONPATH`: how a change of a script or of the worker is
priced against `main`). Instructions, not
time: the machine's load does not move them, only the worker's claim sizes do, which under
callgrind are full (the server is the slow side).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import redis

from bench.script_ir import Server
from bench.systems import ROOT
from conveyor.integrations.redis_server import RedisProcess

SCRIPTS_OF = (
    "from conveyor.protocol.scripts import SCRIPT_NAMES, load_script; import json; "
    "print(json.dumps({n: load_script(n).source for n in SCRIPT_NAMES}))"
)


def scripts_of(env: dict[str, str]) -> dict[str, str]:
    """The expanded scripts of the tree on env's PYTHONPATH."""
    done = subprocess.run([sys.executable, "-c", SCRIPTS_OF], env=env, check=True,
                          capture_output=True, text=True)  # fmt: skip
    found: dict[str, str] = json.loads(done.stdout)
    return found


def run(src: Path | None, scenario: str, n: int) -> tuple[float, str]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (src, ROOT))
    with (
        tempfile.TemporaryDirectory() as tmp,
        RedisProcess(data_dir=Path(tmp) / "marks", appendonly=False) as marks,
    ):
        server = Server(Path(tmp))
        try:
            for source in scripts_of(env).values():
                server.client.script_load(source)
            port = server.client.connection_pool.connection_kwargs["port"]
            done = subprocess.run(
                [sys.executable, "-m", "bench.driver", "--system", "conveyor",
                 "--module", "bench.conveyor_adapter", "--scenario", scenario, "--n", str(n),
                 "--queue-url", f"redis://127.0.0.1:{port}/0",
                 "--mark-url", marks.url, "--logdir", tmp,
                 "--timeout", "900",
                 "--after-fill", f"callgrind_control -i on {server.proc.pid}"],
                env=env, cwd=ROOT, check=True, capture_output=True, text=True,
            )  # fmt: skip
            server.ctl("-i", "off")
            result = done.stdout.rsplit("BENCH-RESULT ", 1)[-1].strip()
            ir = server.dumped()
        finally:
            server.close()
        return ir / n, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, help="a tree's src/ (default: this one's)")
    parser.add_argument("--scenario", default="process_1proc_c100")
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    for _ in range(args.runs):
        ir, result = run(args.src, args.scenario, args.n)
        error = json.loads(result).get("error") if result.startswith("{") else result
        print(f"{args.scenario} n={args.n} src={args.src or 'this tree'}: "
              f"{ir:,.0f} Ir per processed job" + (f" (error: {error})" if error else ""),
              flush=True)  # fmt: skip


if __name__ == "__main__":
    try:
        main()
    except redis.RedisError as exc:
        raise SystemExit(f"run_ir: {exc}") from None

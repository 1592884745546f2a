"""Redis time per call of the hot-path scripts, this tree against a git ref.

    .venv/bin/python -m bench.script_time [--ref main] [--calls 2000] [--reps 5] [--batch 100]

For jobs that use no option: `enqueue_new` (one job a call), `claim` (count
`batch`, at a queue depth of `calls`) and `complete` (`batch` jobs a call;
100 is a worker's batch at its default concurrency for async handlers). Figures
are per job: a call's time divided by its jobs. Each phase
runs on a fresh queue of a private server after CONFIG RESETSTAT; the figure
is INFO commandstats' `usec_per_call` of EVALSHA (the script's whole time in
Redis, the commands it runs included). The Lua of `--ref` is read with `git
show` and expanded like this tree's (protocol §7); both run with this tree's
argument builders, so a ref whose ARGV or KEYS differ cannot be compared.
Variants alternate within each rep; medians are printed. On a shared, loaded
machine the figures are indicative only.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import uuid
from collections.abc import Callable

import redis

from conveyor.integrations.redis_server import RedisProcess
from conveyor.protocol import ops
from conveyor.protocol.keys import QueueKeys
from conveyor.protocol.scripts import SCRIPT_NAMES, expand, load_script

LUA = "src/conveyor/protocol/lua/"
PHASES = ("enqueue_new", "claim", "complete")


def sources_at(ref: str) -> dict[str, str]:
    """The expanded scripts of the hot path at git `ref`."""

    def show(path: str) -> str:
        return subprocess.run(
            ["git", "show", f"{ref}:{LUA}{path}"], check=True, capture_output=True, text=True
        ).stdout

    return {
        name: expand(show(f"{name}.lua"), lambda i: show(f"include/{i}.lua")) for name in PHASES
    }


def this_tree() -> dict[str, str]:
    return {name: load_script(name).source for name in PHASES if name in SCRIPT_NAMES}


def phase_times(
    client: redis.Redis, sources: dict[str, str], calls: int, batch: int = 1
) -> dict[str, float]:
    """usec per job of each phase on a fresh queue (claims and completions `batch` at a time)."""
    shas = {name: client.script_load(text) for name, text in sources.items()}
    keys = QueueKeys("bench", "st-" + uuid.uuid4().hex[:8])

    def run(call: ops.Call) -> object:
        return client.evalsha(shas[call.script], len(call.keys), *call.keys, *call.args)

    def measured(make: Callable[[int], ops.Call], jobs_per_call: int = 1) -> float:
        client.config_resetstat()
        for i in range(calls // jobs_per_call):
            run(make(i))
        stats = client.info("commandstats")["cmdstat_evalsha"]
        return float(stats["usec_per_call"]) / jobs_per_call

    ids = [uuid.uuid4().hex[:16] for _ in range(calls)]
    out = {
        "enqueue_new": measured(
            lambda i: ops.enqueue_new(keys, [(ids[i], "t", '{"n":1}')], events_maxlen=10_000)
        )
    }
    out["claim"] = measured(
        lambda i: ops.claim(
            keys,
            worker_id="w",
            count=batch,
            lease_ms=60_000,
            token=f"k{i}",
            promote=100,
            events_maxlen=10_000,
        ),
        batch,
    )  # fmt: skip
    # claims take jobs in enqueue order: job j was leased by claim j // batch
    out["complete"] = measured(
        lambda i: ops.complete(
            keys,
            [(ids[j], f"k{j // batch}", "1") for j in range(i * batch, (i + 1) * batch)],
            events_maxlen=10_000,
        ),
        batch,
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default="main", help="git ref to compare with")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=1, help="jobs per claim and complete call")
    args = parser.parse_args()
    variants = {args.ref: sources_at(args.ref), "this tree": this_tree()}
    seen: dict[str, dict[str, list[float]]] = {v: {p: [] for p in PHASES} for v in variants}
    with tempfile.TemporaryDirectory() as tmp, RedisProcess(data_dir=tmp) as server:
        client = redis.Redis.from_url(server.url)
        version = client.info("server")["redis_version"]
        for _ in range(args.reps):
            for name, sources in variants.items():
                for phase, usec in phase_times(client, sources, args.calls, args.batch).items():
                    seen[name][phase].append(usec)
            client.flushall()
        client.close()
    print(
        f"Redis {version}: usec of Redis time per job (claims and completions {args.batch} "
        f"a call), median of {args.reps} reps"
    )
    print(f"  {'script':12s}" + "".join(f"{v:>14s}" for v in variants))
    for phase in PHASES:
        row = "".join(f"{statistics.median(seen[v][phase]):14.2f}" for v in variants)
        print(f"  {phase:12s}{row}")


if __name__ == "__main__":
    main()

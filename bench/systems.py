"""Which systems and scenarios exist, and where each system's code and interpreter live.

An adapter module (bench/conveyor_adapter.py, bench/peers/<name>_peer.py) defines:

  NAME, DISTRIBUTION        the system's name here and its distribution (for its version)
  API                       "sync" or "async": the API `enqueue_single` uses
  PER_JOB_STATE             whether Redis keeps a record of each job (status, attempts)
  BULK                      the bulk enqueue API measured by `enqueue_bulk`, or None
  SETTINGS                  the worker's configuration, for the report
  COMPLETION_STREAM         (stream key, field, value, id field) of a per-job `completed`
                            event, or None; it gives the enqueue-to-complete latency
  worker_command(python)    argv of one worker process (run from the repository root)
  Client(url)               open(), enqueue(arg), optional aenqueue(arg) and bulk(args),
                            close(); each may be sync or async

An adapter reads its worker's concurrency with `concurrency(default)` below: the
library's own default, or 100 in the equal-concurrency scenarios (`*_c100`).
Importing an adapter module defines the worker's tasks, so the module doubles as
the worker's import target. A row of the results is a system; `huey@redis5` is the
same adapter as `huey` in another virtualenv (its fastest install).
"""

from __future__ import annotations

import os
import random
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS_DIR = Path(__file__).resolve().parent / "requirements"
RESULTS = Path(__file__).resolve().parent / "results"
# where a partial run writes by default (not kept in git): bench/__main__.py
PARTIAL = RESULTS / "partial"

SUBJECT = "conveyor"
PEERS = (
    "arq", "saq", "rq", "dramatiq", "huey", "huey@redis5", "celery", "taskiq", "taskiq@0.12",
    "bullmq", "streaq", "docket", "chasquimq",
)  # fmt: skip
SYSTEMS = (SUBJECT, *PEERS)
REDIS = "redis"  # the pseudo-system of the `ceiling` scenario

# The virtualenv of each peer row: "peers" is .venv-bench, any other name .venv-bench-<name>,
# installed from bench/requirements/<name>.txt. A peer gets its own where its versions
# conflict with the others' (arq holds redis-py < 6) or where it is another install of a
# peer (its fastest one: `huey@redis5`, `taskiq@0.12`).
VENV_OF = {
    "arq": "arq", "huey@redis5": "redis5", "taskiq@0.12": "taskiq012", "streaq": "streaq",
    "docket": "docket", "chasquimq": "chasquimq",
}  # fmt: skip
MAIN_VENV = "peers"


def venv_group(system: str) -> str | None:
    """The virtualenv group of a peer row; None for Conveyor and the ceiling (.venv)."""
    if system in (SUBJECT, REDIS):
        return None
    return VENV_OF.get(system, MAIN_VENV)


def venv_dir(group: str) -> Path:
    return ROOT / (".venv-bench" if group == MAIN_VENV else f".venv-bench-{group}")


def requirements(group: str) -> Path:
    return REQUIREMENTS_DIR / f"{group}.txt"


PEER_VENV = venv_dir(MAIN_VENV)  # holds matplotlib for the chart too


def adapter(system: str) -> str:
    """`huey@redis5` runs bench/peers/huey_peer.py."""
    return system.split("@")[0]


MODULES = {SUBJECT: "bench.conveyor_adapter"} | {p: f"bench.peers.{adapter(p)}_peer" for p in PEERS}


@dataclass(frozen=True)
class Scenario:
    kind: str  # the driver's function
    procs: int = 1  # worker processes
    c100: bool = False  # every async-capable system at concurrency 100
    net: bool = False  # clients reach Redis through the delay proxy (bench/netproxy.py)


SPECS = {
    "enqueue_single": Scenario("enqueue_single"),
    "enqueue_single_async": Scenario("enqueue_single_async"),
    "enqueue_single_uvloop": Scenario("enqueue_single_uvloop"),
    "enqueue_bulk": Scenario("enqueue_bulk"),
    "process_1proc": Scenario("process"),
    "process_2proc": Scenario("process", procs=2),
    "process_1proc_c100": Scenario("process", c100=True),
    "process_2proc_c100": Scenario("process", procs=2, c100=True),
    "latency": Scenario("latency"),
    "redis_memory": Scenario("redis_memory"),
    "enqueue_single_net": Scenario("enqueue_single", net=True),
    "process_1proc_net": Scenario("process", net=True),
    "process_1proc_net_c100": Scenario("process", c100=True, net=True),
    "latency_net": Scenario("latency", net=True),
    "ceiling": Scenario("ceiling"),
}
SCENARIOS = tuple(SPECS)
PROCESS = tuple(name for name, spec in SPECS.items() if spec.kind == "process")
NET = tuple(name for name, spec in SPECS.items() if spec.net)
EQUAL = 100  # the concurrency of the equal-settings scenarios


def concurrency(default: int) -> int:
    """The worker concurrency an adapter runs with: its library's default, or EQUAL in
    the `*_c100` scenarios (the driver sets BENCH_CONCURRENCY)."""
    return int(os.environ.get("BENCH_CONCURRENCY") or default)


def at_defaults() -> bool:
    return not os.environ.get("BENCH_CONCURRENCY")


# Kept here (not read from the adapters) because the orchestrator runs in
# Conveyor's venv and cannot import the peers. The adapters say the same.
HAS_BULK = {
    "conveyor": "Queue.enqueue_many", "rq": "Queue.enqueue_many", "bullmq": "Queue.addBulk",
    "streaq": "Worker.enqueue_many", "chasquimq": "Queue.add_bulk",
}  # fmt: skip
# enqueue_single_async: systems with an asyncio API *besides* a sync one. The
# async-only peers are measured through it in enqueue_single.
# enqueue_single_uvloop: the same on uvloop's loop instead of asyncio's, for information.
ASYNC_SCENARIOS = ("enqueue_single_async", "enqueue_single_uvloop")
# The single-enqueue scenarios run as one block, shuffled together: each
# Conveyor figure is then compared with peers' runs taken beside it.
ENQUEUE_SINGLE = ("enqueue_single", *ASYNC_SCENARIOS)
HAS_SYNC_AND_ASYNC = {"conveyor"}
ASYNC_ONLY = {"arq", "saq", "taskiq", "taskiq@0.12", "bullmq", "streaq", "docket", "chasquimq"}
# Systems whose worker runs asyncio handlers with a concurrency setting: they run the
# `*_c100` scenarios. The thread-pool workers (rq, dramatiq, huey, celery) have no such
# setting; their defaults' figure of the same rep stands for them in those comparisons.
ASYNC_CAPABLE = {SUBJECT, *ASYNC_ONLY}
PER_JOB_STATE = {"conveyor", "rq", "arq", "saq", "bullmq", "streaq", "docket"}
# Figures a project publishes for a setup this machine cannot run, shown beside the
# measured ones and never used in a ratio.
PUBLISHED = {
    "chasquimq": {
        "scenario": "process_1proc_c100",
        "jobs_per_s": 419_000.0,
        "setup": "jobs consumed at concurrency 100, Apple M3, Redis 8.6 (its own benchmark)",
        "source": "chasquimq.pages.dev, ChasquiMQ's published benchmark",
    }
}


def applies(system: str, scenario: str) -> str | None:
    """None when `system` runs `scenario`, else why it does not apply."""
    if scenario == "ceiling":
        return None if system == REDIS else "only for redis"
    if system == REDIS:
        return "redis runs only the ceiling"
    if scenario == "enqueue_bulk" and system not in HAS_BULK:
        return "no bulk enqueue API"
    if SPECS[scenario].c100 and system not in ASYNC_CAPABLE:
        return "no asyncio concurrency setting: its process_* figure (defaults) stands for it"
    if scenario in ASYNC_SCENARIOS and system not in HAS_SYNC_AND_ASYNC:
        if system in ASYNC_ONLY:
            return "asyncio only: its enqueue_single is already async"
        return "no asyncio API"
    return None


def stand_in(peer: str, scenario: str) -> str:
    """The scenario whose figure counts for `peer` in `scenario`: in the equal-concurrency
    scenarios a thread-pool peer (no asyncio concurrency setting) counts with its defaults."""
    if SPECS[scenario].c100 and peer not in ASYNC_CAPABLE:
        return scenario.replace("_c100", "")
    return scenario


def with_stand_ins(systems: list[str], scenarios: list[str]) -> list[str]:
    """`scenarios` with, before each equal-concurrency one, the scenario that stands in for
    a thread-pool peer among `systems` there, when it was not asked for: without it that
    peer would silently drop out of the ratio."""
    out: list[str] = []
    for scenario in scenarios:
        needed = {stand_in(system, scenario) for system in systems if system != SUBJECT}
        out += [sc for sc in sorted(needed - {scenario}) if sc not in scenarios and sc not in out]
        out.append(scenario)
    return out


def python_for(system: str) -> Path:
    """Conveyor and the ceiling run in Conveyor's venv, each peer in its own group's."""
    group = venv_group(system)
    if group is None:
        return Path(sys.executable)
    return venv_dir(group) / "bin" / "python"


def subprocess_env(
    queue_url: str, mark_url: str, python: Path, concurrency: str = ""
) -> dict[str, str]:
    env = dict(os.environ)
    # the repository root first (for `bench`); an existing PYTHONPATH stays after it
    # (prototypes of src/ were A/B-tested that way: bench/README.md)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["BENCH_REDIS_URL"] = queue_url
    env["BENCH_MARK_URL"] = mark_url
    env["BENCH_CONCURRENCY"] = concurrency
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("VIRTUAL_ENV", None)
    return env


def plan(
    systems: list[str], scenarios: list[str], reps: int, enqueue_reps: int, rng: random.Random
) -> list[tuple[int, str, str]]:
    """(rep, scenario, system) in the order to run them. Each rep runs the
    scenarios in turn, the systems of each in a fresh random order; the
    single-enqueue scenarios form one block, shuffled together, and run
    `enqueue_reps` times (they take seconds, and single round trips are the
    noisiest figure here), the others `reps` times."""
    blocks: list[list[str]] = []
    for scenario in scenarios:
        if scenario in ENQUEUE_SINGLE and blocks and blocks[-1][0] in ENQUEUE_SINGLE:
            blocks[-1].append(scenario)
        else:
            blocks.append([scenario])
    runs = []
    for rep in range(max(reps, enqueue_reps)):
        for block in blocks:
            if rep >= (enqueue_reps if block[0] in ENQUEUE_SINGLE else reps):
                continue
            who = [REDIS] if block == ["ceiling"] else systems
            order = [(sc, sy) for sc in block for sy in who if applies(sy, sc) is None]
            rng.shuffle(order)
            runs += [(rep, scenario, system) for scenario, system in order]
    return runs

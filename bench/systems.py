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

Importing an adapter module defines the worker's tasks, so the module doubles as
the worker's import target.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEER_VENV = ROOT / ".venv-bench"
REQUIREMENTS = Path(__file__).resolve().parent / "requirements-peers.txt"
RESULTS = Path(__file__).resolve().parent / "results"

SUBJECT = "conveyor"
PEERS = ("arq", "saq", "rq", "dramatiq", "huey", "celery", "taskiq", "bullmq")
SYSTEMS = (SUBJECT, *PEERS)
REDIS = "redis"  # the pseudo-system of the `ceiling` scenario

MODULES = {SUBJECT: "bench.conveyor_adapter"} | {p: f"bench.peers.{p}_peer" for p in PEERS}

SCENARIOS = (
    "enqueue_single",
    "enqueue_single_async",
    "enqueue_single_uvloop",
    "enqueue_bulk",
    "process_1proc",
    "process_2proc",
    "latency",
    "redis_memory",
    "ceiling",
)

# Kept here (not read from the adapters) because the orchestrator runs in
# Conveyor's venv and cannot import the peers. The adapters say the same.
HAS_BULK = {"conveyor": "Queue.enqueue_many", "rq": "Queue.enqueue_many", "bullmq": "Queue.addBulk"}
# enqueue_single_async: systems with an asyncio API *besides* a sync one. The
# async-only peers (arq, saq, taskiq, bullmq) are measured through it in enqueue_single.
# enqueue_single_uvloop: the same on uvloop's loop instead of asyncio's, for information.
ASYNC_SCENARIOS = ("enqueue_single_async", "enqueue_single_uvloop")
# The single-enqueue scenarios run as one block, shuffled together: each
# Conveyor figure is then compared with peers' runs taken beside it.
ENQUEUE_SINGLE = ("enqueue_single", *ASYNC_SCENARIOS)
HAS_SYNC_AND_ASYNC = {"conveyor"}
ASYNC_ONLY = {"arq", "saq", "taskiq", "bullmq"}
PER_JOB_STATE = {"conveyor", "rq", "arq", "saq", "bullmq"}


def applies(system: str, scenario: str) -> str | None:
    """None when `system` runs `scenario`, else why it does not apply."""
    if scenario == "ceiling":
        return None if system == REDIS else "only for redis"
    if system == REDIS:
        return "redis runs only the ceiling"
    if scenario == "enqueue_bulk" and system not in HAS_BULK:
        return "no bulk enqueue API"
    if scenario in ASYNC_SCENARIOS and system not in HAS_SYNC_AND_ASYNC:
        if system in ASYNC_ONLY:
            return "asyncio only: its enqueue_single is already async"
        return "no asyncio API"
    return None


def python_for(system: str) -> Path:
    """Conveyor and the ceiling run in Conveyor's venv, the peers in .venv-bench."""
    if system in (SUBJECT, REDIS):
        return Path(sys.executable)
    return PEER_VENV / "bin" / "python"


def subprocess_env(queue_url: str, mark_url: str, python: Path) -> dict[str, str]:
    env = dict(os.environ)
    # the repository root first (for `bench`); an existing PYTHONPATH stays after it
    # (bench/NOTES-for-lead.md: prototypes of src/ were A/B-tested that way)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["BENCH_REDIS_URL"] = queue_url
    env["BENCH_MARK_URL"] = mark_url
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

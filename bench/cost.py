"""Work per job between two snapshots of `INFO cpu` and `INFO commandstats` (Redis's
side) and of the worker processes' CPU time (bench/driver.py's `Ctx` takes them), over
the steady window or the whole run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

TICK = 1 / os.sysconf("SC_CLK_TCK")


def sessions_cpu(sessions: set[int], proc: Path = Path("/proc")) -> float:
    """CPU seconds (user + system) of every live process in `sessions`, with what each
    has collected of its children that ended (`cutime`, `cstime`): a worker started
    with `start_new_session` is its session's leader, so its pool's and forked
    children's work counts too. The clock tick (10 ms) limits the resolution."""
    total = 0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended between the listing and the read
            continue
        # after the command's name, which may hold spaces: state, ppid, pgrp, session, ...
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[3]) in sessions:
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total * TICK


def window_cost(
    samples: list[tuple[int, dict[str, Any]]],
    whole: tuple[dict[str, Any], dict[str, Any], int],
) -> dict[str, Any]:
    """The steady window's cost per job when both samples were taken at distinct
    counts, else the whole run's (a tiny N drains between two polls); both are kept."""
    before, after, n = whole
    out = {f"{k}_whole_run": v for k, v in cost_per_job(before, after, n).items()}
    if len(samples) == 2 and samples[1][0] > samples[0][0]:
        (n0, s0), (n1, s1) = samples
        out |= cost_per_job(s0, s1, n1 - n0) | {"redis_window": f"jobs {n0}-{n1}"}
    else:
        out |= cost_per_job(before, after, n) | {"redis_window": "whole run"}
    return out


def cost_per_job(before: dict[str, Any], after: dict[str, Any], n: int) -> dict[str, Any]:
    """Redis server CPU (and its system-call share) and commands per job between two
    snapshots, and the worker processes' CPU when both snapshots have it.

    Commands run inside scripts are counted too (Redis 7 counts them)."""
    n = max(n, 1)
    calls = {
        k: after["calls"].get(k, 0) - before["calls"].get(k, 0)
        for k in after["calls"]
        if after["calls"].get(k, 0) - before["calls"].get(k, 0) > 0
    }
    top = sorted(calls.items(), key=lambda kv: -kv[1])[:8]
    workers = {}
    if "workers_cpu" in before and "workers_cpu" in after:
        spent = after["workers_cpu"] - before["workers_cpu"]
        workers = {"worker_cpu_us_per_job": round(spent / n * 1e6, 2)}
    return {
        "redis_cpu_us_per_job": round((after["cpu"] - before["cpu"]) / n * 1e6, 2),
        "redis_sys_cpu_us_per_job": round((after["cpu_sys"] - before["cpu_sys"]) / n * 1e6, 2),
        **workers,
        "redis_commands_per_job": round(sum(calls.values()) / n, 2),
        "scripts_per_job": round((calls.get("evalsha", 0) + calls.get("eval", 0)) / n, 3),
        "top_commands_per_job": {k: round(v / n, 3) for k, v in top},
    }

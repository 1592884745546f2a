"""Each (system, scenario)'s record from its reps, and the targets judged from the
records: ratios within each rep against the fastest peer row of that rep (bench/README.md,
"Targets")."""

from __future__ import annotations

from typing import Any

from bench.stats import median
from bench.systems import (
    ASYNC_ONLY,
    PER_JOB_STATE,
    REDIS,
    SPECS,
    SUBJECT,
    applies,
    stand_in,
)

FIELDS = ("jobs_per_s", "p50_ms", "p99_ms", "bytes_per_job")
EXTRA = ("complete_p50_ms", "complete_p99_ms")
BULK_TARGET = 50_000.0
PROCESS_TARGET = 5.0  # x the fastest peer row, at defaults and at equal concurrency
NET_PROCESS_TARGET = 10.0  # x the fastest peer row with 1 ms added each way
NET_P50_MS = 3.0
REDIS_CPU_PER_PROCESSED_US = 10.0
COST = ("redis_cpu_us_per_job", "redis_commands_per_job", "worker_cpu_us_per_job")


def _med(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None and "error" not in r]
    return median(values) if values else None


def record(system: str, scenario: str, runs: list[dict[str, Any]] | None) -> dict[str, Any]:
    rec: dict[str, Any] = {"system": system, "scenario": scenario}
    for key in FIELDS:
        rec[key] = None
    rec["runs"] = runs or []
    reason = applies(system, scenario)
    if reason is not None:
        rec["note"] = f"not applicable: {reason}"
        return rec
    if not runs:
        rec["note"] = "not run"
        return rec
    for key in FIELDS:
        rec[key] = _med(runs, key)
    if SPECS[scenario].kind == "latency":
        for key in EXTRA:
            rec[key] = _med(runs, key)
    errors = [r["error"] for r in runs if "error" in r]
    if errors:
        rec["error"] = errors[0]
        rec["failed_runs"] = len(errors)
    for key in COST:
        value = _med(runs, key)
        if value is not None:
            rec[key] = value
    apis = {r.get("api") for r in runs if r.get("api")}
    if apis:
        rec["api"] = ", ".join(sorted(apis))
    return rec


def per_rep(runs: dict[tuple[str, str], list[dict[str, Any]]], system: str, scenario: str,
            key: str) -> dict[int, float]:  # fmt: skip
    return {
        r["rep"]: r[key]
        for r in runs.get((system, scenario), [])
        if "error" not in r and r.get(key) is not None
    }


def best_peer_ratios(
    runs: dict[tuple[str, str], list[dict[str, Any]]],
    scenario: str,
    subject_scenario: str,
    peers: list[str],
) -> tuple[float | None, list[float], list[str]]:
    """Median over reps of Conveyor / the fastest peer row of that rep (higher is better)."""
    mine = per_rep(runs, SUBJECT, subject_scenario, "jobs_per_s")
    ratios, fastest = [], []
    for rep, value in sorted(mine.items()):
        peer_values = {
            p: per_rep(runs, p, stand_in(p, scenario), "jobs_per_s").get(rep) for p in peers
        }
        peer_values = {p: v for p, v in peer_values.items() if v}
        if not peer_values:
            continue
        best = max(peer_values, key=lambda p: peer_values[p])
        ratios.append(value / peer_values[best])
        fastest.append(best)
    return (median(ratios) if ratios else None), ratios, fastest


def targets(
    runs: dict[tuple[str, str], list[dict[str, Any]]],
    records: dict[tuple[str, str], dict[str, Any]],
    peers: list[str],
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def add(name: str, goal: str, value: float | None, holds: bool | None, **more: Any) -> None:
        out.append({"target": name, "goal": goal, "measured": value, "holds": holds, **more})

    def ratio_target(scenario: str, mine: str, group: list[str], times: float | None,
                     name: str | None = None, goal: str | None = None) -> None:  # fmt: skip
        ratio, per, fastest = best_peer_ratios(runs, scenario, mine, group)
        goal = goal or (f">= {times:g}x the fastest peer row" if times else "(for information)")
        holds = None if ratio is None or times is None else ratio >= times
        add(name or scenario, goal, ratio, holds, per_rep=per, fastest_peer=fastest)

    measured_here = [p for p in peers if p != "chasquimq" or _ran(runs, p)]
    for scenario in ("process_1proc", "process_2proc", "process_1proc_c100",
                     "process_2proc_c100"):  # fmt: skip
        if (SUBJECT, scenario) in records:
            ratio_target(scenario, scenario, measured_here, PROCESS_TARGET)
    for scenario in ("process_1proc_net", "process_1proc_net_c100"):
        if (SUBJECT, scenario) in records:
            ratio_target(scenario, scenario, measured_here, NET_PROCESS_TARGET)
    _chasquimq_targets(runs, records, peers, add)
    net = records.get((SUBJECT, "latency_net"), {}).get("p50_ms")
    if (SUBJECT, "latency_net") in records:
        add("latency_net p50 (enqueue to start)", f"< {NET_P50_MS:g} ms", net,
            None if net is None else net < NET_P50_MS)  # fmt: skip
    for scenario in ("process_1proc_c100", "process_1proc"):
        cpu = records.get((SUBJECT, scenario), {}).get("redis_cpu_us_per_job")
        if (SUBJECT, scenario) in records:
            add(f"Redis CPU per processed job ({scenario})",
                f"<= {REDIS_CPU_PER_PROCESSED_US:g} µs", cpu,
                None if cpu is None else cpu <= REDIS_CPU_PER_PROCESSED_US)  # fmt: skip
    cpu = records.get((SUBJECT, "enqueue_single"), {}).get("redis_cpu_us_per_job")
    hueys = {p: records.get((p, "enqueue_single"), {}).get("redis_cpu_us_per_job")
             for p in peers if p.split("@")[0] == "huey"}  # fmt: skip
    hueys = {p: v for p, v in hueys.items() if v is not None}
    if cpu is not None and hueys:
        low = min(hueys, key=lambda p: hueys[p])
        add("Redis CPU per enqueued job (enqueue_single)", "<= Huey's (its lowest install)", cpu,
            cpu <= hueys[low], lowest_peer=low, lowest_peer_value=hueys[low])  # fmt: skip
    elif (SUBJECT, "enqueue_single") in records:
        add("Redis CPU per enqueued job (enqueue_single)", "<= Huey's", cpu, None)
    ratio_target("enqueue_single", "enqueue_single", peers, 1.0, "enqueue_single (sync)",
                 ">= 1x the fastest peer row's enqueue_single")  # fmt: skip
    async_peers = [p for p in peers if p in ASYNC_ONLY]
    ratio_target("enqueue_single", "enqueue_single_async", async_peers, 1.0,
                 "enqueue_single (async) vs the asyncio-only peers",
                 ">= 1x the fastest asyncio-only peer row")  # fmt: skip
    ratio_target("enqueue_single", "enqueue_single_async", peers, None,
                 "enqueue_single (async) vs every peer")  # fmt: skip
    ratio_target("enqueue_single", "enqueue_single_uvloop", peers, None,
                 "enqueue_single (async, on uvloop)",
                 "(for information: the same client on uvloop's loop)")  # fmt: skip
    if (SUBJECT, "enqueue_single_net") in records:
        ratio_target("enqueue_single_net", "enqueue_single_net", peers, None,
                     "enqueue_single_net (sync)")  # fmt: skip
    bulk = records.get((SUBJECT, "enqueue_bulk"), {}).get("jobs_per_s")
    add("enqueue_bulk", ">= 50,000 jobs/s", bulk, None if bulk is None else bulk >= BULK_TARGET)
    lat = records.get((SUBJECT, "latency"), {})
    p50, p99 = lat.get("p50_ms"), lat.get("p99_ms")
    add("latency p50 (enqueue to start)", "<= 1 ms", p50, None if p50 is None else p50 <= 1)
    add("latency p99 (enqueue to start)", "<= 5 ms", p99, None if p99 is None else p99 <= 5)
    mem = records.get((SUBJECT, "redis_memory"), {}).get("bytes_per_job")
    stateful = {
        p: records.get((p, "redis_memory"), {}).get("bytes_per_job")
        for p in peers
        if p in PER_JOB_STATE
    }
    stateful = {p: v for p, v in stateful.items() if v is not None}
    if mem is not None and stateful:
        low = min(stateful, key=lambda p: stateful[p])
        add("redis_memory", "<= the lowest peer that keeps per-job state", mem,
            mem <= stateful[low], lowest_peer=low, lowest_peer_bytes=stateful[low])  # fmt: skip
    else:
        add("redis_memory", "<= the lowest peer that keeps per-job state", mem, None)
    ceiling = records.get((REDIS, "ceiling"), {}).get("jobs_per_s")
    own = records.get((SUBJECT, "process_1proc_c100"), {}).get("jobs_per_s")
    if ceiling and own:
        add("process_1proc_c100 vs Redis ceiling",
            "(for information: share of what Redis allows at claim/ack batches of 100)",
            own / ceiling, None, ceiling_jobs_per_s=ceiling)  # fmt: skip
    return out


def _ran(runs: dict[tuple[str, str], list[dict[str, Any]]], system: str) -> bool:
    return any("error" not in r for (sy, _), rs in runs.items() if sy == system for r in rs)


def _chasquimq_targets(
    runs: dict[tuple[str, str], list[dict[str, Any]]],
    records: dict[tuple[str, str], dict[str, Any]],
    peers: list[str],
    add: Any,
) -> None:
    """At least ChasquiMQ's throughput on the same server, where it can run."""
    if "chasquimq" not in peers:
        return
    goal = ">= 1x ChasquiMQ on the same server"
    for scenario in ("process_1proc_c100", "process_2proc_c100"):
        if (SUBJECT, scenario) not in records:
            continue
        ratio, per, _ = best_peer_ratios(runs, scenario, scenario, ["chasquimq"])
        if ratio is not None:
            add(f"{scenario} vs ChasquiMQ", goal, ratio, ratio >= 1, per_rep=per,
                fastest_peer=["chasquimq"] * len(per))  # fmt: skip
            continue
        error = records.get(("chasquimq", scenario), {}).get("error") or "not run"
        add(f"{scenario} vs ChasquiMQ", goal, None, None,
            note="ChasquiMQ could not run here: " + error.splitlines()[0][:200])  # fmt: skip

"""Turn the per-rep results into latest.json, latest.md and latest.png."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from bench import host
from bench.stats import median
from bench.systems import (
    HAS_BULK,
    PEERS,
    PER_JOB_STATE,
    PUBLISHED,
    REDIS,
    RESULTS,
    ROOT,
    SPECS,
    SUBJECT,
    stand_in,
)
from bench.targets import record, targets
from bench.venv import peer_python


def brief(result: dict[str, Any]) -> str:
    if "error" in result:
        return "ERROR " + result["error"].splitlines()[0][:150]
    parts = []
    if result.get("jobs_per_s") is not None:
        parts.append(f"{result['jobs_per_s']:,.0f} jobs/s")
    if result.get("p50_ms") is not None:
        parts.append(f"p50 {result['p50_ms']:.2f} ms p99 {result['p99_ms']:.2f} ms")
    if result.get("complete_p50_ms") is not None:
        parts.append(f"complete p50 {result['complete_p50_ms']:.2f} ms")
    if result.get("bytes_per_job") is not None:
        parts.append(f"{result['bytes_per_job']:,.0f} B/job")
    return ", ".join(parts)


def _num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def _range(runs: list[dict[str, Any]], key: str, digits: int = 0) -> str:
    values = [r[key] for r in runs if "error" not in r and r.get(key) is not None]
    if len(values) < 2:
        return ""
    return f" ({_num(min(values), digits)}–{_num(max(values), digits)})"


def _cell(rec: dict[str, Any], key: str, digits: int = 0) -> str:
    if rec.get(key) is None:
        if rec.get("error"):
            return "**error**"
        return "–"
    text = _num(rec[key], digits) + _range(rec["runs"], key, digits)
    if rec.get("error"):
        text += f" ({rec['failed_runs']} failed)"
    return text


def markdown(
    records: dict[tuple[str, str], dict[str, Any]],
    goals: list[dict[str, Any]],
    systems: list[str],
    meta: dict[str, Any],
) -> str:
    lines = [
        "# Benchmark results (latest run)",
        "",
        f"Started {meta['started_at']}, {_reps(meta)}, took {meta['duration_s']:.0f} s; "
        f"N = {meta['n']:,} (bulk {meta['bulk_n']:,}, latency {meta['lat_n']:,} jobs at "
        f"{meta['rate']:.0f}/s); {meta['cpus']} CPUs, load average at the end "
        f"{', '.join(f'{x:.1f}' for x in meta['load_average_at_end'])}.",
        "Medians over reps, (min–max) when there was more than one. Method: bench/README.md.",
        "",
        host.sentence(meta.get("host")),
        "",
        "## Every system at its defaults "
        "(Conveyor at its CLI default: concurrency 100 for its async handler)",
        "",
        "| system | enqueue_single jobs/s | enqueue_single_async jobs/s | enqueue_bulk jobs/s "
        "| process_1proc jobs/s | process_2proc jobs/s | latency p50 / p99 ms (to start) "
        "| to complete p50 / p99 ms | redis_memory bytes/job |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for system in systems:
        r = {sc: records.get((system, sc), {"runs": []}) for sc in (
            "enqueue_single", "enqueue_single_async", "enqueue_single_uvloop", "enqueue_bulk",
            "process_1proc", "process_2proc", "latency", "redis_memory")}  # fmt: skip
        single = _cell(r["enqueue_single"], "jobs_per_s")
        async_single = _cell(r["enqueue_single_async"], "jobs_per_s")
        if r["enqueue_single_uvloop"].get("jobs_per_s") is not None:
            async_single += f"; on uvloop {_cell(r['enqueue_single_uvloop'], 'jobs_per_s')}"
        if r["enqueue_single"].get("api") == "async":
            single += " (async)"
        lat = r["latency"]
        latency = (
            "**error**" if lat.get("p50_ms") is None and lat.get("error")
            else f"{_num(lat.get('p50_ms'), 2)} / {_num(lat.get('p99_ms'), 2)}"
        )  # fmt: skip
        complete = f"{_num(lat.get('complete_p50_ms'), 2)} / {_num(lat.get('complete_p99_ms'), 2)}"
        if lat.get("complete_p50_ms") is None:
            complete = "–"
        bulk = _cell(r["enqueue_bulk"], "jobs_per_s")
        if system in HAS_BULK and r["enqueue_bulk"].get("jobs_per_s") is not None:
            bulk += f" (`{HAS_BULK[system]}`)"
        memory = _cell(r["redis_memory"], "bytes_per_job")
        if system in PER_JOB_STATE:
            memory += " ¹"
        lines.append(
            f"| {_name(system)} | {single} | "
            f"{async_single} | {bulk} | "
            f"{_cell(r['process_1proc'], 'jobs_per_s')} | "
            f"{_cell(r['process_2proc'], 'jobs_per_s')} | {latency} | {complete} | {memory} |"
        )
    lines += [
        "",
        "¹ keeps a record per job in Redis (status, attempts): the group the memory target "
        'compares with. "(async)": the library has only an asyncio API. To complete: when the '
        "job's `completed` event is seen on its events stream (only Conveyor and BullMQ publish "
        "one per job).",
    ]
    lines += _equal_table(records, systems)
    lines += _net_table(records, systems, meta)
    lines += _cost_table(records, systems)
    lines += _published(systems)
    lines += [
        "",
        "## Targets (ratios within each rep, then the median; the fastest peer row of each rep)",
        "",
        *([] if (meta.get("host") or {}).get("quiet") else [host.sentence(meta.get("host")), ""]),
        "| target | goal | measured | holds | per rep |",
        "|---|---|---|---|---|",
    ]
    for g in goals:
        value = g["measured"]
        if value is None:
            shown = "–"
        elif g["target"].startswith(("process_", "enqueue_single")) or "share" in g["goal"]:
            shown = f"{value:.2f}x"
        elif "ms" in g["goal"]:
            shown = f"{value:.2f} ms"
        elif "µs" in g["goal"] or "Huey" in g["goal"]:
            shown = f"{value:.1f} µs"
        else:
            shown = _num(value)
        if g["target"] == "redis_memory" and g.get("lowest_peer"):
            shown += f" vs {g['lowest_peer']} {g['lowest_peer_bytes']:,.0f}"
        if g.get("lowest_peer_value") is not None:
            shown += f" vs {g['lowest_peer']} {g['lowest_peer_value']:.1f} µs"
        if g.get("note"):
            shown = g["note"]
        if g["target"].endswith("Redis ceiling") and g.get("ceiling_jobs_per_s"):
            shown += f" of {g['ceiling_jobs_per_s']:,.0f} jobs/s"
        holds = {True: "yes", False: "**no**", None: "–"}[g["holds"]]
        per = ", ".join(
            f"{x:.2f} ({p})" for x, p in zip(g.get("per_rep", []), g.get("fastest_peer", []),
                                             strict=False)
        )  # fmt: skip
        lines.append(f"| {g['target']} | {g['goal']} | {shown} | {holds} | {per} |")
    lines += _ceiling_table(records.get((REDIS, "ceiling")))
    errors = [rec for rec in records.values() if rec.get("error")]
    if errors:
        lines += ["", "## Errors", ""]
        for rec in errors:
            first = rec["error"].splitlines()[0][:300]
            lines.append(
                f"- {rec['system']} / {rec['scenario']} ({rec['failed_runs']} of "
                f"{len(rec['runs'])} runs): {first}"
            )
    lines += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()), ""]
    return "\n".join(lines)


def _name(system: str) -> str:
    return "**conveyor**" if system == SUBJECT else system


def _table(
    records: dict[tuple[str, str], dict[str, Any]],
    systems: list[str],
    columns: list[tuple[str, str, str, int]],
) -> list[str]:
    """One row per system that has a figure in any column: (header, scenario, key, digits).
    A cell shows what stands in for a system that does not run the scenario."""
    lines = [
        "| system | " + " | ".join(c[0] for c in columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for system in systems:
        cells, any_value = [], False
        for _, scenario, key, digits in columns:
            rec = records.get((system, stand_in(system, scenario)), {"runs": []})
            cell = _cell(rec, key, digits)
            any_value |= rec.get(key) is not None or bool(rec.get("error"))
            if scenario != stand_in(system, scenario) and rec.get(key) is not None:
                cell += " (defaults)"
            cells.append(cell)
        if any_value:
            lines.append(f"| {_name(system)} | " + " | ".join(cells) + " |")
    return lines


def _equal_table(records: dict[tuple[str, str], dict[str, Any]], systems: list[str]) -> list[str]:
    if not any(sc.endswith("_c100") and not SPECS[sc].net for _, sc in records):
        return []
    return [
        "",
        "## Equal settings: every async-capable system at concurrency 100",
        "",
        "The thread-pool workers (rq, dramatiq, huey, celery) have no asyncio concurrency "
        "setting: their defaults' figure stands for them, marked (defaults).",
        "",
        *_table(records, systems, [
            ("process_1proc_c100 jobs/s", "process_1proc_c100", "jobs_per_s", 0),
            ("process_2proc_c100 jobs/s", "process_2proc_c100", "jobs_per_s", 0),
        ]),
    ]  # fmt: skip


def _net_table(
    records: dict[tuple[str, str], dict[str, Any]], systems: list[str], meta: dict[str, Any]
) -> list[str]:
    if not any(SPECS[sc].net for _, sc in records):
        return []
    trips = meta.get("ping_round_trip_ms", {})
    return [
        "",
        f"## A network: {meta.get('net_delay_ms_each_way', 1):g} ms added each way between "
        "every client and Redis",
        "",
        f"Through bench/netproxy.py. PING round trip measured at the start: "
        f"{trips.get('through_the_proxy', '–')} ms through the proxy, "
        f"{trips.get('direct', '–')} ms direct. N = {meta.get('net_n', '–')} per run "
        "(latency: the latency scenario's).",
        "",
        *_table(records, systems, [
            ("enqueue_single_net jobs/s", "enqueue_single_net", "jobs_per_s", 0),
            ("process_1proc_net jobs/s (defaults)", "process_1proc_net", "jobs_per_s", 0),
            ("process_1proc_net_c100 jobs/s", "process_1proc_net_c100", "jobs_per_s", 0),
            ("latency_net p50 ms", "latency_net", "p50_ms", 2),
            ("latency_net p99 ms", "latency_net", "p99_ms", 2),
        ]),
    ]  # fmt: skip


def _cost_table(records: dict[tuple[str, str], dict[str, Any]], systems: list[str]) -> list[str]:
    return [
        "",
        "## Redis work per job, inside the steady window",
        "",
        "`INFO cpu` (used_cpu_sys + used_cpu_user) and `INFO commandstats` when 10% and when "
        "90% of the jobs were done (processing) or sent (single enqueue), divided by the jobs "
        "in between; bulk: the whole call. Commands inside scripts count too. Worker CPU: "
        "the worker processes' user + system time (with their children's) from `/proc` at "
        "the same two moments, per job (the handler's mark included, the same for every "
        "system). Medians over reps.",
        "",
        *_table(records, systems, [
            ("processed, defaults: CPU µs", "process_1proc", "redis_cpu_us_per_job", 1),
            ("commands", "process_1proc", "redis_commands_per_job", 1),
            ("worker CPU µs", "process_1proc", "worker_cpu_us_per_job", 1),
            ("processed, c100: CPU µs", "process_1proc_c100", "redis_cpu_us_per_job", 1),
            ("commands", "process_1proc_c100", "redis_commands_per_job", 1),
            ("worker CPU µs", "process_1proc_c100", "worker_cpu_us_per_job", 1),
            ("enqueued one at a time: CPU µs", "enqueue_single", "redis_cpu_us_per_job", 1),
            ("commands", "enqueue_single", "redis_commands_per_job", 1),
            ("enqueued in bulk: CPU µs", "enqueue_bulk", "redis_cpu_us_per_job", 1),
            ("commands", "enqueue_bulk", "redis_commands_per_job", 1),
        ]),
    ]  # fmt: skip


def _published(systems: list[str]) -> list[str]:
    rows = [(s, PUBLISHED[s]) for s in systems if s in PUBLISHED]
    if not rows:
        return []
    lines = [
        "",
        "## Published figures (not measured here, never in a ratio)",
        "",
        "| system | scenario | jobs/s | setup | source |",
        "|---|---|---|---|---|",
    ]
    for system, fig in rows:
        lines.append(
            f"| {system} | {fig['scenario']} | {_num(fig['jobs_per_s'])} (published) "
            f"| {fig['setup']} | {fig['source']} |"
        )
    return lines


def _ceiling_table(rec: dict[str, Any] | None) -> list[str]:
    if not rec:
        return []
    runs = [r for r in rec["runs"] if "error" not in r]
    if not runs:
        return ["", "## Redis ceiling", "", f"error: {rec.get('error')}"]
    details = [r["detail"] for r in runs]
    lines = ["", "## Redis ceiling (redis-benchmark on the same server; medians)", ""]
    modes = list(details[0]["commands"])
    lines += ["| requests/s | " + " | ".join(details[0]["commands"][modes[0]]) + " |"]
    lines += ["|---|" + "---|" * len(details[0]["commands"][modes[0]])]
    for mode in modes:
        cells = [
            _num(median([d["commands"][mode][c] for d in details]))
            for c in details[0]["commands"][mode]
        ]
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    lines += ["", "| Conveyor script | jobs/s |", "|---|---|"]
    for name, value in details[0]["scripts"].items():
        if "jobs_per_s" in value:
            lines.append(
                f"| {name} | {_num(median([d['scripts'][name]['jobs_per_s'] for d in details]))} |"
            )
        else:
            for mode in value:
                cell = _num(median([d["scripts"][name][mode] for d in details]))
                lines.append(f"| {name}, {mode} | {cell} |")
    lines += ["", "| one redis-py connection | calls/s |", "|---|---|"]
    for name in details[0]["redis_py"]:
        lines.append(f"| {name} | {_num(median([d['redis_py'][name] for d in details]))} |")
    lines += ["", "| what Redis allows | jobs/s |", "|---|---|"]
    for name in details[0]["allowed_jobs_per_s"]:
        value = median([d["allowed_jobs_per_s"][name] for d in details])
        lines.append(f"| {name} | {_num(value)} |")
    return lines


def write(
    out: Path,
    runs: dict[tuple[str, str], list[dict[str, Any]]],
    systems: list[str],
    scenarios: list[str],
    meta: dict[str, Any],
) -> dict[str, str]:
    out.mkdir(parents=True, exist_ok=True)
    records: dict[tuple[str, str], dict[str, Any]] = {}
    for system in [*systems, REDIS]:
        for scenario in scenarios:
            if system == REDIS and scenario != "ceiling":
                continue
            if scenario == "ceiling" and system != REDIS:
                continue
            records[(system, scenario)] = record(system, scenario, runs.get((system, scenario)))
    peers = [s for s in systems if s in PEERS]
    goals = targets(runs, records, peers)
    meta = {**meta, "host": host.judge(runs.get((REDIS, "ceiling"), []))}
    published = [{"system": s, **PUBLISHED[s]} for s in systems if s in PUBLISHED]
    doc = {
        "meta": meta,
        "targets": goals,
        "records": list(records.values()),
        "published_not_measured": published,
    }
    json_path = out / "latest.json"
    json_path.write_text(json.dumps(doc, indent=1) + "\n")
    md_path = out / "latest.md"
    md_path.write_text(markdown(records, goals, systems, meta))
    png_path = out / "latest.png"
    _chart(json_path, png_path)
    publish_chart(out, png_path)
    return {"json": str(json_path), "md": str(md_path), "png": str(png_path)}


def publish_chart(
    out: Path, png_path: Path, *, site: Path = ROOT / "docs" / "benchmarks.png"
) -> bool:
    """The site's benchmark page shows the official run's chart (its tables come straight from
    latest.md): an official run copies it there; any other run leaves it alone."""
    if out.resolve() != RESULTS.resolve():
        return False
    shutil.copyfile(png_path, site)
    return True


def _chart(json_path: Path, png_path: Path) -> None:
    """matplotlib from the peers' venv when it is there, else the built-in PNG writer."""
    python = peer_python()
    if python.exists():
        done = subprocess.run(
            [str(python), "-m", "bench.chart", str(json_path), str(png_path)],
            cwd=ROOT, capture_output=True, text=True, env={"PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        if done.returncode == 0:
            return
        print(f"bench: matplotlib chart failed ({done.stderr.strip()[-300:]}); plain PNG instead")
    from bench.chart import plain_chart

    plain_chart(json.loads(json_path.read_text()), png_path)


def _reps(meta: dict[str, Any]) -> str:
    """ "3 rep(s)", and the single-enqueue scenarios' own count when it differs."""
    reps, enqueue_reps = meta["reps"], meta.get("enqueue_reps", meta["reps"])
    if enqueue_reps == reps:
        return f"{reps} rep(s)"
    return f"{reps} rep(s) ({enqueue_reps} of the single-enqueue scenarios)"

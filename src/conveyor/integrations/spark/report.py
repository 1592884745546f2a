"""`conveyor report`: analytics over archived Parquet and live queues, as HTML and JSON.

Inputs: the archive (`<path>/queue=*/day=*`, optional) and, for each live queue, its jobs
(every state; finished ones are deduplicated against the archive) and its events stream.
Measures, per queue, task and priority:

* queue wait = started_at - run_at (the latest attempt's wait) and run time =
  finished_at - started_at, as p50 / p95 / p99 (`percentile_approx`);
* retry, failure and stall rates (jobs with attempts > 1, failed jobs, jobs with stalls);
* throughput over time (completed / failed / retried per time bucket, from events when
  there are any, else from finish times);
* the most frequent errors (from retried/failed events, else from failed jobs).

Output: `<out>/report.html` (self-contained, inline SVG charts) and `<out>/summary.json`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .schema import EVENTS_COLUMNS, JOBS_COLUMNS, ddl

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["ReportPaths", "main", "report"]

REPORT_VERSION = 1
_BUCKETS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)
# Only the columns the report uses are read: Parquet and the Redis readers skip the rest
# (data and result are most of a job's bytes), and the cached frames stay small.
_JOB_COLUMNS = ("queue", "id", "task", "priority", "state", "attempts", "stalls", "run_at",
                "started_at", "finished_at", "error")  # fmt: skip
_EVENT_COLUMNS = ("event", "at", "error")
_SCHEMAS = {
    "conveyor": ddl([c for c in JOBS_COLUMNS if c[0] in _JOB_COLUMNS]),
    "conveyor_events": ddl([c for c in EVENTS_COLUMNS if c[0] in _EVENT_COLUMNS]),
}


@dataclass(frozen=True, slots=True)
class ReportPaths:
    html: str
    json: str
    summary: dict[str, Any]


def _archived(spark: SparkSession, path: str | None) -> DataFrame | None:
    if not path:
        return None
    try:
        data = spark.read.parquet(path)
    except Exception as exc:  # AnalysisException: nothing archived there yet
        if "PATH_NOT_FOUND" in str(exc) or "Path does not exist" in str(exc):
            return None
        raise
    return data.select(*_JOB_COLUMNS)


def _live(spark: SparkSession, url: str, queues: Sequence[str], prefix: str, fmt: str) -> Any:
    reader = spark.read.format(fmt).schema(_SCHEMAS[fmt]).option("url", url)
    frames = [reader.option("queue", q).option("prefix", prefix).load() for q in queues]
    if not frames:
        return None
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    return union


def _seconds(later: str, earlier: str) -> Column:
    from pyspark.sql import functions as F

    return (F.unix_micros(later) - F.unix_micros(earlier)) / 1e6


_DIMENSIONS = ("queue", "task", "priority")


def _job_stats(jobs: DataFrame) -> dict[str, Any]:
    """Totals and per queue / task / priority stats, in one pass (grouping sets)."""
    from pyspark.sql import functions as F

    q = F.array(F.lit(0.5), F.lit(0.95), F.lit(0.99))

    def share(condition: Column) -> Column:
        return F.sum(F.when(condition, 1).otherwise(0))

    rows = (
        jobs.groupingSets([[], *[[d] for d in _DIMENSIONS]], *_DIMENSIONS)
        .agg(
            F.grouping_id().alias("gid"),
            F.count("*").alias("jobs"),
            share(F.col("state") == "completed").alias("completed"),
            share(F.col("state") == "failed").alias("failed"),
            share(F.col("attempts") > 1).alias("retried_jobs"),
            share(F.col("stalls") > 0).alias("stalled_jobs"),
            F.percentile_approx("wait", q, 1000).alias("wait"),
            F.percentile_approx("run", q, 1000).alias("run"),
        )
        .collect()
    )
    # grouping_id has a bit per dimension, set when the dimension is aggregated away.
    everything = (1 << len(_DIMENSIONS)) - 1
    stats: dict[str, Any] = {f"by_{d}": [] for d in _DIMENSIONS}
    for row in rows:
        entry = _entry(row)
        if row["gid"] == everything:
            counts = ("jobs", "completed", "failed", "retried_jobs", "stalled_jobs")
            stats["totals"] = {k: int(row[k]) for k in counts} | {
                k: v for k, v in entry.items() if k.endswith("_rate")
            }
            continue
        for bit, dimension in enumerate(reversed(_DIMENSIONS)):
            if row["gid"] == everything & ~(1 << bit):
                value = row[dimension]
                stats[f"by_{dimension}"].append({dimension: _label(value), **entry})
    for dimension in _DIMENSIONS:
        stats[f"by_{dimension}"].sort(key=lambda e, d=dimension: _order(e[d]))
    return stats


def _label(value: Any) -> str | None:
    return None if value is None else str(value)


def _order(value: str | None) -> tuple[int, float, str]:
    """Numbers (priorities) numerically, then text."""
    if value is None:
        return (2, 0.0, "")
    try:
        return (0, float(value), "")
    except ValueError:
        return (1, 0.0, value)


def _entry(row: Any) -> dict[str, Any]:
    n = int(row["jobs"])
    entry: dict[str, Any] = {"jobs": n}
    wait, run = row["wait"] or [None] * 3, row["run"] or [None] * 3
    for p, w, r in zip((50, 95, 99), wait, run, strict=True):
        entry[f"wait_p{p}"], entry[f"run_p{p}"] = _round(w), _round(r)
    for rate, counted in (
        ("retry", "retried_jobs"),
        ("failure", "failed"),
        ("stall", "stalled_jobs"),
    ):
        entry[f"{rate}_rate"] = round(int(row[counted]) / n, 4) if n else None
    return entry


def _round(value: Any) -> float | None:
    return None if value is None else round(float(value), 4)


def _bucket(span_s: float) -> int:
    return next((b for b in _BUCKETS if span_s / b <= 120), _BUCKETS[-1])


def _throughput(timed: DataFrame, lo_us: int | None, hi_us: int | None) -> dict[str, Any]:
    """Counts per time bucket of `timed` (columns kind, us)."""
    from pyspark.sql import functions as F

    if lo_us is None or hi_us is None:
        return {"bucket_seconds": None, "series": []}
    size = _bucket((hi_us - lo_us) / 1e6)
    counts = (
        timed.groupBy(F.floor(F.col("us") / (size * 1_000_000)).alias("b"), "kind")
        .count()
        .collect()
    )
    series: dict[int, dict[str, int]] = {}
    for row in counts:
        series.setdefault(int(row["b"]), {})[row["kind"]] = int(row["count"])
    return {
        "bucket_seconds": size,
        "series": [
            {"t": datetime.fromtimestamp(b * size, UTC).isoformat(), **series[b]}
            for b in sorted(series)
        ],
    }


def _timeline(jobs: DataFrame | None, events: DataFrame | None) -> tuple[Any, dict[str, int]]:
    """(kind, us) rows for the throughput chart, and event counts by type; the span comes
    from the same aggregation as the counts (one Spark job)."""
    from pyspark.sql import functions as F

    if events is not None:
        timed = events.select(F.col("event").alias("kind"), F.unix_micros("at").alias("us"))
    elif jobs is not None:
        timed = jobs.where(F.col("finished_at").isNotNull()).select(
            F.col("state").alias("kind"), F.unix_micros("finished_at").alias("us")
        )
    else:
        return None, {}
    rows = (
        timed.groupBy("kind")
        .agg(F.count("*").alias("n"), F.min("us").alias("lo"), F.max("us").alias("hi"))
        .collect()
    )
    counts = {r["kind"]: int(r["n"]) for r in rows}
    finishing = [r for r in rows if r["kind"] in ("completed", "failed", "retried")]
    lo = min((r["lo"] for r in finishing), default=None)
    hi = max((r["hi"] for r in finishing), default=None)
    timed = timed.where(F.col("kind").isin("completed", "failed", "retried"))
    return (timed, lo, hi), counts


def _top_errors(jobs: DataFrame | None, events: DataFrame | None) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    if events is not None:
        source = events.where(F.col("error").isNotNull()).select("error", "event")
    elif jobs is not None:
        source = jobs.where(F.col("error").isNotNull()).select(
            "error", F.col("state").alias("event")
        )
    else:
        return []
    # Errors are grouped by their first line with numbers masked ("customer # is blocked").
    first_line = F.substring(F.split(F.col("error"), "\n").getItem(0), 1, 200)
    rows = (
        source.withColumn("line", first_line)
        .groupBy(F.regexp_replace("line", r"\d+", "#").alias("error"))
        .agg(
            F.count("*").alias("count"),
            F.collect_set("event").alias("events"),
            F.min("line").alias("example"),
        )
        .orderBy(F.desc("count"), "error")
        .limit(10)
        .collect()
    )
    return [
        {"error": r["error"], "count": r["count"], "events": sorted(r["events"]),
         "example": r["example"]}
        for r in rows
    ]  # fmt: skip


def summarize(
    spark: SparkSession,
    *,
    archive_path: str | None,
    url: str | None,
    queues: Sequence[str],
    prefix: str = "conveyor",
    live_jobs: bool = True,
) -> dict[str, Any]:
    """The report's numbers (what summary.json holds)."""

    from . import register

    register(spark)
    archived = _archived(spark, archive_path)
    live = _live(spark, url, queues, prefix, "conveyor") if url and live_jobs else None
    events = _live(spark, url, queues, prefix, "conveyor_events") if url else None
    parts = [p for p in (archived, live) if p is not None]
    jobs = None
    if parts:
        jobs = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
        jobs = (
            jobs.dropDuplicates(["queue", "id", "finished_at"])
            .withColumn("wait", _seconds("started_at", "run_at"))
            .withColumn("run", _seconds("finished_at", "started_at"))
            .cache()
        )
    if events is not None:
        events = events.cache()
    summary: dict[str, Any] = {
        "report_version": REPORT_VERSION,
        "generated_at": datetime.now(UTC).isoformat(),
        "sources": {"archive": archive_path, "queues": list(queues)},
    }
    if jobs is not None:
        summary |= _job_stats(jobs)
    timeline, counts = _timeline(jobs, events)
    if events is not None:
        summary["events"] = counts
    summary["throughput"] = (
        _throughput(*timeline) if timeline else {"bucket_seconds": None, "series": []}
    )
    summary["top_errors"] = _top_errors(jobs, events)
    for frame in (jobs, events):
        if frame is not None:
            frame.unpersist()
    return summary


def report(
    spark: SparkSession,
    out_dir: str,
    *,
    archive_path: str | None = None,
    url: str | None = None,
    queues: Sequence[str] = (),
    prefix: str = "conveyor",
    live_jobs: bool = True,
) -> ReportPaths:
    """Write `<out_dir>/report.html` and `<out_dir>/summary.json` (a local directory).
    `live_jobs=False` reads only the events of the live queues, not their jobs."""
    from .report_html import render

    started = time.monotonic()
    summary = summarize(
        spark, archive_path=archive_path, url=url, queues=queues, prefix=prefix,
        live_jobs=live_jobs,
    )  # fmt: skip
    summary["seconds"] = round(time.monotonic() - started, 3)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, html_path = out / "summary.json", out / "report.html"
    json_path.write_text(json.dumps(summary, indent=2, default=_json_default) + "\n")
    html_path.write_text(render(summary))
    return ReportPaths(str(html_path.resolve()), str(json_path.resolve()), summary)


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)


def main(argv: Sequence[str] | None = None) -> int:
    """`conveyor report`: see --help."""
    parser = argparse.ArgumentParser(
        prog="conveyor report",
        description="Throughput, wait/run percentiles, retry/failure/stall rates and top "
        "errors, over archived Parquet and live queues; writes report.html and summary.json.",
    )
    parser.add_argument("--url", default=os.environ.get("CONVEYOR_REDIS_URL"), help="Redis URL")
    parser.add_argument("--queue", "-q", action="append", default=[], help="live queue (repeat)")
    parser.add_argument("--archive", help="archive dataset root (as given to conveyor archive)")
    parser.add_argument("--out", default="conveyor-report", help="output directory (local)")
    parser.add_argument("--prefix", default="conveyor")
    parser.add_argument("--master", help="Spark master, e.g. local[4] or spark://host:7077")
    args = parser.parse_args(argv)
    if not args.archive and not (args.url and args.queue):
        parser.error("give --archive, or --url with at least one --queue (or both)")
    from .session import build_session

    spark = build_session(args.master, app_name="conveyor-report")
    try:
        paths = report(
            spark,
            args.out,
            archive_path=args.archive,
            url=args.url if args.queue else None,
            queues=args.queue,
            prefix=args.prefix,
        )
    finally:
        spark.stop()
    print(f"report: {paths.html}\nsummary: {paths.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`conveyor report`: analytics over archived Parquet and live queues, as HTML and JSON.

Inputs: the archive (`<path>/queue=*/day=*`, optional) and, for each live queue, its jobs
(every state; finished ones are deduplicated against the archive) and its events stream.
Measures, per queue, task and priority:

* queue wait = started_at - run_at (the latest attempt's wait) and run time =
  finished_at - started_at, as p50 / p95 / p99 (`percentile_approx`);
* retry, failure and stall rates (jobs with attempts > 1, failed jobs, jobs with stalls);
* throughput over time (completed / failed / retried per time bucket, from events when
  there are any, else from finish times);
* the most frequent errors: a failure's from the failed jobs (the events stream is capped:
  its oldest failures may be gone), a retry's from the retried events.

Output: `<out>/report.html` (self-contained, inline SVG charts) and `<out>/summary.json`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .schema import EVENTS_COLUMNS, JOBS_COLUMNS, ddl

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["Activity", "ReportPaths", "event_activity", "report"]

REPORT_VERSION = 2
_BUCKETS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)
# Only the columns the report uses are read: Parquet and the Redis readers skip the rest
# (data and result are most of a job's bytes).
_JOB_COLUMNS = ("queue", "id", "task", "priority", "state", "attempts", "stalls", "run_at",
                "started_at", "finished_at", "error")  # fmt: skip
_EVENT_COLUMNS = ("event", "at", "error", "jobs")
_SCHEMAS = {
    "conveyor": ddl([c for c in JOBS_COLUMNS if c[0] in _JOB_COLUMNS]),
    "conveyor_events": ddl([c for c in EVENTS_COLUMNS if c[0] in _EVENT_COLUMNS]),
}


@dataclass(frozen=True, slots=True)
class Activity:
    """What the report takes from the events: counts by type, throughput, and the errors
    (kind, error, n, example: one per event type and error)."""

    counts: dict[str, int]
    throughput: dict[str, Any]
    errors: list[dict[str, Any]]


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


def _live(
    spark: SparkSession, url: str, queues: Sequence[str], prefix: str, fmt: str, **options: str
) -> Any:
    reader = spark.read.format(fmt).schema(_SCHEMAS[fmt]).option("url", url).options(**options)
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
_STARTED = "started_bucket"  # the latency chart's dimension: start time // bucket size
_FAILED = "failed_error"  # a failed job's error, masked as in _activity (None: not failed)


def _first_line(error: Column) -> Column:
    from pyspark.sql import functions as F

    return F.substring(F.split(error, "\n").getItem(0), 1, 200)


def _masked(line: Column) -> Column:
    from pyspark.sql import functions as F

    return F.regexp_replace(line, r"\d+", "#")


def _job_stats(jobs: DataFrame, bucket_seconds: int | None) -> dict[str, Any]:
    """Totals, per queue / task / priority stats, the failed jobs' errors and, given the
    throughput's bucket size, the queue wait of the jobs started in each bucket: one pass
    over the jobs (grouping sets), so they are read and deduplicated once."""
    from pyspark.sql import functions as F

    q = F.array(F.lit(0.5), F.lit(0.95), F.lit(0.99))

    def share(condition: Column) -> Column:
        return F.sum(F.when(condition, 1).otherwise(0))

    failed = F.col("state") == "failed"
    line = F.when(failed, _first_line(F.col("error")))
    jobs = jobs.withColumn("failed_line", line).withColumn(_FAILED, _masked(line))
    dimensions = [*_DIMENSIONS, _FAILED]
    if bucket_seconds:
        started = F.floor(F.unix_seconds("started_at") / bucket_seconds)
        jobs = jobs.withColumn(_STARTED, started)
        dimensions.append(_STARTED)
    rows = (
        jobs.groupingSets([[], *[[d] for d in dimensions]], *dimensions)
        .agg(
            F.grouping_id().alias("gid"),
            F.count("*").alias("jobs"),
            share(F.col("state") == "completed").alias("completed"),
            share(F.col("state") == "failed").alias("failed"),
            share(F.col("attempts") > 1).alias("retried_jobs"),
            share(F.col("stalls") > 0).alias("stalled_jobs"),
            F.percentile_approx("wait", q, 1000).alias("wait"),
            F.percentile_approx("run", q, 1000).alias("run"),
            F.min("failed_line").alias("example"),
        )
        .collect()
    )
    # grouping_id has a bit per dimension (the last one is bit 0), set when the
    # dimension is aggregated away.
    everything = (1 << len(dimensions)) - 1
    alone = {everything & ~(1 << bit): d for bit, d in enumerate(reversed(dimensions))}
    stats: dict[str, Any] = {f"by_{d}": [] for d in _DIMENSIONS}
    stats["started"] = {}
    stats["failed_errors"] = []
    for row in rows:
        if row["gid"] == everything:
            entry = _entry(row)
            counts = ("jobs", "completed", "failed", "retried_jobs", "stalled_jobs")
            stats["totals"] = {k: int(row[k]) for k in counts} | {
                k: v for k, v in entry.items() if k.endswith("_rate")
            }
            continue
        dimension = alone.get(row["gid"])
        if dimension == _STARTED:
            if row[_STARTED] is not None:  # None: jobs that never started
                stats["started"][int(row[_STARTED])] = row
        elif dimension == _FAILED:
            if row[_FAILED] is not None:  # None: jobs not failed (or failed with no error)
                error = {"kind": "failed", "error": row[_FAILED], "n": row["jobs"]}
                stats["failed_errors"].append(error | {"example": row["example"]})
        elif dimension is not None:
            stats[f"by_{dimension}"].append({dimension: _label(row[dimension]), **_entry(row)})
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


_COUNTED = ("created", "completed", "failed", "retried")


def _activity(timed: DataFrame) -> tuple[dict[str, int], dict[str, Any], list[dict[str, Any]]]:
    """Counts by kind, throughput and top errors of `timed` (columns kind, us, error and
    jobs, the job events a row stands for), from one aggregation: per kind, second and
    error (first line, numbers masked as `#`) the count, the first and last microsecond and
    an example line. A few thousand rows reach the driver whatever the number of events,
    and the events are read once, uncached."""
    from pyspark.sql import functions as F

    rows = (
        timed.withColumn("line", _first_line(F.col("error")))
        .groupBy(
            "kind",
            F.floor(F.col("us") / 1_000_000).alias("second"),
            _masked(F.col("line")).alias("error"),
        )
        .agg(
            F.sum("jobs").alias("n"),
            F.min("us").alias("lo"),
            F.max("us").alias("hi"),
            F.min("line").alias("example"),
        )
        .collect()
    )
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["kind"]] = counts.get(row["kind"], 0) + int(row["n"])
    return counts, _throughput(rows), _error_rows(rows)


def _throughput(rows: Sequence[Any]) -> dict[str, Any]:
    """Created / completed / failed / retried per time bucket (at most 120), every bucket of
    the window present: a bucket without events is zeros, not a gap to draw across."""
    timed = [r for r in rows if r["kind"] in _COUNTED and r["second"] is not None]
    if not timed:
        return {"bucket_seconds": None, "series": []}
    lo, hi = min(r["lo"] for r in timed), max(r["hi"] for r in timed)
    size = _bucket((hi - lo) / 1e6)
    counts: dict[int, dict[str, int]] = {}
    for row in timed:
        bucket = counts.setdefault(int(row["second"]) // size, {})
        bucket[row["kind"]] = bucket.get(row["kind"], 0) + int(row["n"])
    first, last = min(counts), max(counts)
    return {
        "bucket_seconds": size,
        "window": {"from": _iso(lo / 1e6), "to": _iso(hi / 1e6)},
        "series": [
            {"t": _iso(b * size), **{k: counts.get(b, {}).get(k, 0) for k in _COUNTED}}
            for b in range(first, last + 1)
        ],
    }


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat()


def _latency(started: dict[int, Any], throughput: dict[str, Any]) -> list[dict[str, Any]]:
    """Queue wait p50 / p95 of the jobs that started in each bucket of the throughput
    window (None where none started: no wait to tell, which the chart leaves as a gap).
    `started`: the rows of `_job_stats` by start bucket."""
    size = throughput.get("bucket_seconds")
    series = throughput.get("series") or []
    if not size or not series:
        return []
    out = []
    for point in series:
        b = int(datetime.fromisoformat(point["t"]).timestamp()) // size
        row = started.get(b)
        wait = (row["wait"] if row else None) or [None, None]
        out.append({"t": point["t"], "wait_p50": _round(wait[0]), "wait_p95": _round(wait[1]),
                    "started": int(row["jobs"]) if row else 0})  # fmt: skip
    return out


def _error_rows(rows: Sequence[Any]) -> list[dict[str, Any]]:
    """One row (kind, error, n, example) per event type and error of `rows`."""
    grouped: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        if row["error"] is not None:
            key = (row["kind"], row["error"])
            entry = grouped.setdefault(key, {"kind": key[0], "error": key[1], "n": 0,
                                             "example": row["example"]})  # fmt: skip
            entry["n"] += int(row["n"])
            entry["example"] = min(entry["example"], row["example"])
    return list(grouped.values())


def _top_errors(rows: Sequence[Any]) -> list[dict[str, Any]]:
    """The ten most frequent errors (grouped with numbers masked), with an example."""
    grouped: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row["error"] is None:
            continue
        entry = grouped.setdefault(
            row["error"], {"count": 0, "events": set(), "example": row["example"]}
        )
        entry["count"] += int(row["n"])
        entry["events"].add(row["kind"])
        entry["example"] = min(entry["example"], row["example"])
    ranked = sorted(grouped.items(), key=lambda item: (-item[1]["count"], item[0]))[:10]
    return [
        {"error": error, "count": e["count"], "events": sorted(e["events"]),
         "example": e["example"]}
        for error, e in ranked
    ]  # fmt: skip


def event_activity(
    spark: SparkSession, url: str, queues: Sequence[str], prefix: str = "conveyor"
) -> Activity:
    """The events' part of the report on its own (`summarize(activity=...)` takes it). Once
    no worker writes to the queues any more their events are final, so this can run while
    the same session does other work: the pipeline reads the events during the archive.
    It reads a row per stream entry (`rows=entries`) and weighs it by its jobs: the same
    counts as a row per job event, from about 37,000 rows instead of 3 million in the
    pipeline."""
    from pyspark.sql import functions as F

    from . import register

    register(spark)
    events = _live(spark, url, queues, prefix, "conveyor_events", rows="entries")
    timed = events.select(
        F.col("event").alias("kind"), F.unix_micros("at").alias("us"), "error", "jobs"
    )
    return Activity(*_activity(timed))


def _jobs(archived: DataFrame | None, live: DataFrame | None) -> DataFrame | None:
    """The archived and the live jobs, each once, with their wait and run times. The live
    jobs are deduplicated, against the archive (a job archived but not yet removed is in
    both) and against themselves (a read pages by rank, so a job can be met twice when the
    index shifts under it). The archive alone is not: each job is in it once (a re-run
    neither loses nor duplicates one, `archive.py`), and the shuffle a dedupe takes was
    nearly half of a cold report over 1,000,000 archived jobs."""
    if live is None:
        jobs = archived
    else:
        union = live if archived is None else archived.unionByName(live)
        jobs = union.dropDuplicates(["queue", "id", "finished_at"])
    if jobs is None:
        return None
    return jobs.withColumn("wait", _seconds("started_at", "run_at")).withColumn(
        "run", _seconds("finished_at", "started_at")
    )


def summarize(
    spark: SparkSession,
    *,
    archive_path: str | None,
    url: str | None,
    queues: Sequence[str],
    prefix: str = "conveyor",
    live_jobs: bool = True,
    activity: Activity | None = None,
) -> dict[str, Any]:
    """The report's numbers (what summary.json holds). `activity`: the queues' events as
    `event_activity` read them earlier (then they are not read again)."""
    from pyspark.sql import functions as F

    from . import register

    register(spark)
    archived = _archived(spark, archive_path)
    live = _live(spark, url, queues, prefix, "conveyor") if url and live_jobs else None
    if activity is None and url and queues:
        activity = event_activity(spark, url, queues, prefix)
    jobs = _jobs(archived, live)
    summary: dict[str, Any] = {
        "report_version": REPORT_VERSION,
        "generated_at": datetime.now(UTC).isoformat(),
        "sources": {"archive": archive_path, "queues": list(queues)},
    }
    if activity is None and jobs is not None:
        # no events: finish times and errors of the jobs, read twice
        jobs = jobs.cache()
        timed = jobs.select(
            F.col("state").alias("kind"), F.unix_micros("finished_at").alias("us"), "error",
            F.lit(1).alias("jobs"),
        )  # fmt: skip
        counts, throughput, errors = _activity(timed)
    elif activity is not None:
        counts, throughput, errors = activity.counts, activity.throughput, activity.errors
    else:
        counts, throughput, errors = {}, {}, []
    throughput = throughput or {"bucket_seconds": None, "series": []}
    if jobs is not None:
        stats = _job_stats(jobs, throughput["bucket_seconds"])
        started = stats.pop("started")
        # failures from the jobs, as the totals count them: the stream may have lost some
        errors = [e for e in errors if e["kind"] != "failed"] + stats.pop("failed_errors")
        summary |= stats
    if activity is not None:
        summary["events"] = counts
    summary["throughput"] = throughput
    summary["top_errors"] = _top_errors(errors)
    if jobs is not None:
        summary["latency"] = _latency(started, throughput)
        jobs.unpersist()
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
    activity: Activity | None = None,
) -> ReportPaths:
    """Write `<out_dir>/report.html` and `<out_dir>/summary.json` (a local directory).
    `live_jobs=False` reads only the events of the live queues, not their jobs; `activity`
    is their events read earlier (`event_activity`)."""
    from .report_html import render

    started = time.monotonic()
    summary = summarize(
        spark, archive_path=archive_path, url=url, queues=queues, prefix=prefix,
        live_jobs=live_jobs, activity=activity,
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

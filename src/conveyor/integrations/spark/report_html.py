"""The report's HTML page: one self-contained file (inline CSS and SVG charts drawn by
matplotlib, no scripts)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any

from conveyor.options import PRIORITIES

from .charts import bar_chart, line_chart

__all__ = ["render"]

_CSS = """
body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:880px;color:#111827}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #e5e7eb}
.cards{display:flex;flex-wrap:wrap;gap:.75rem}.card{border:1px solid #e5e7eb;border-radius:6px;
padding:.5rem .9rem;min-width:7rem}.card b{display:block;font-size:1.3rem}
table{border-collapse:collapse;font-size:.85rem;width:100%}th,td{padding:.25rem .5rem;
border-bottom:1px solid #f3f4f6;text-align:right}th:first-child,td:first-child{text-align:left}
.muted{color:#6b7280;font-size:.85rem}code{font-size:.8rem}
"""

_PCT_COLUMNS = (
    ("jobs", "jobs"),
    ("wait_p50", "wait p50 s"),
    ("wait_p95", "wait p95 s"),
    ("wait_p99", "wait p99 s"),
    ("run_p50", "run p50 s"),
    ("run_p95", "run p95 s"),
    ("run_p99", "run p99 s"),
    ("retry_rate", "retry"),
    ("failure_rate", "failure"),
    ("stall_rate", "stall"),
)


def _cell(value: Any, column: str = "") -> str:
    if value is None:
        return "–"
    if column.endswith("_rate") and isinstance(value, int | float):
        return f"{value * 100:.2f} %"
    if isinstance(value, float):
        return f"{value:.3f}" if value < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return escape(str(value))


# The client's priority names (conveyor.options.PRIORITIES), shown beside the numbers.
_PRIORITY_NAMES = {str(number): name for name, number in PRIORITIES.items()}


def _key_label(key: str, value: Any) -> str:
    if key == "priority" and value is not None:
        name = _PRIORITY_NAMES.get(str(value))
        return f"{name} ({value})" if name else str(value)
    return "–" if value is None else str(value)


def _table(rows: Sequence[dict[str, Any]], key: str) -> str:
    if not rows:
        return '<p class="muted">no data</p>'
    head = "".join(f"<th>{escape(label)}</th>" for _, label in _PCT_COLUMNS)
    body = "".join(
        f"<tr><td>{escape(_key_label(key, r.get(key)))}</td>"
        + "".join(f"<td>{_cell(r.get(c), c)}</td>" for c, _ in _PCT_COLUMNS)
        + "</tr>"
        for r in rows
    )
    return f"<table><tr><th>{escape(key)}</th>{head}</tr>{body}</table>"


def _percentile_chart(title: str, rows: Sequence[dict[str, Any]], key: str, what: str) -> str:
    groups = [
        (_key_label(key, r.get(key)), {p: r.get(f"{what}_{p}") for p in ("p50", "p95", "p99")})
        for r in rows[:12]
    ]
    return bar_chart(title, groups, unit="seconds")


def _times(points: Sequence[dict[str, Any]]) -> list[float]:
    return [datetime.fromisoformat(p["t"]).timestamp() for p in points]


def _activity_charts(throughput: dict[str, Any], latency: Sequence[dict[str, Any]]) -> str:
    """Throughput, failures and retries (on their own scale: a few failures beside a peak of
    thousands a second would lie flat on zero), backlog and queue wait over time."""
    points = throughput.get("series") or []
    size = throughput.get("bucket_seconds") or 1
    times = _times(points)

    def per_second(kind: str) -> list[float]:
        return [p.get(kind, 0) / size for p in points]

    backlog, level = [], 0
    for p in points:
        level += p.get("created", 0) - p.get("completed", 0) - p.get("failed", 0)
        backlog.append(float(level))
    charts = [
        line_chart(f"Throughput ({size} s buckets)", times,
                   {"completed": per_second("completed")}, unit="jobs / s"),
        line_chart("Failures and retries", times,
                   {"failed": per_second("failed"), "retried": per_second("retried")},
                   unit="jobs / s"),
    ]  # fmt: skip
    if any(p.get("created") for p in points):
        charts.append(line_chart(
            "Backlog: jobs enqueued and not finished since the window began", times,
            {"backlog": backlog}, unit="jobs"))  # fmt: skip
    else:
        charts.append('<p class="muted">Backlog over time needs the events stream.</p>')
    nan = float("nan")
    charts.append(line_chart(
        "Queue wait over time (jobs started in each bucket)", _times(latency),
        {"p50": [nan if x["wait_p50"] is None else x["wait_p50"] for x in latency],
         "p95": [nan if x["wait_p95"] is None else x["wait_p95"] for x in latency]},
        unit="seconds"))  # fmt: skip
    return "\n".join(charts)


def _when(iso: Any) -> str:
    """An ISO-8601 instant as `2026-11-25 13:40:02 UTC`."""
    if not iso:
        return "–"
    return datetime.fromisoformat(str(iso)).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _cards(summary: dict[str, Any]) -> str:
    totals = summary.get("totals", {})
    cards = [
        ("jobs", totals.get("jobs")),
        ("completed", totals.get("completed")),
        ("failed", totals.get("failed")),
        ("retry rate", totals.get("retry_rate")),
        ("failure rate", totals.get("failure_rate")),
        ("stall rate", totals.get("stall_rate")),
        ("events", sum(summary.get("events", {}).values()) if summary.get("events") else None),
    ]
    return (
        '<div class="cards">'
        + "".join(
            f'<div class="card"><b>{_cell(v, k.replace(" ", "_"))}</b>{escape(k)}</div>'
            for k, v in cards
        )
        + "</div>"
    )


def _errors(errors: Sequence[dict[str, Any]]) -> str:
    if not errors:
        return '<p class="muted">no errors</p>'
    rows = "".join(
        f'<tr><td><code>{escape(e["error"])}</code><br><span class="muted">e.g. '
        f"{escape(e.get('example') or '')}</span></td><td>{e['count']:,}</td>"
        f"<td>{escape(', '.join(e['events']))}</td></tr>"
        for e in errors
    )
    return f"<table><tr><th>error</th><th>count</th><th>seen in</th></tr>{rows}</table>"


def render(summary: dict[str, Any]) -> str:
    sources = summary.get("sources", {})
    by_queue = summary.get("by_queue", [])
    by_priority = summary.get("by_priority", [])
    events = summary.get("events") or {}
    window = summary.get("throughput", {}).get("window") or {}
    event_rows = "".join(
        f"<tr><td>{escape(k)}</td><td>{v:,}</td></tr>" for k, v in sorted(events.items())
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Conveyor report</title>
<style>{_CSS}</style></head><body>
<h1>Conveyor report</h1>
<p class="muted">generated {_when(summary.get("generated_at"))} ·
window analysed {_when(window.get("from"))} to {_when(window.get("to"))} ·
archive {escape(str(sources.get("archive") or "none"))} ·
live queues {escape(", ".join(sources.get("queues", [])) or "none")}</p>
{_cards(summary)}
<h2>Activity over time</h2>
{_activity_charts(summary.get("throughput", {}), summary.get("latency", []))}
<h2>Queue wait and run time by queue</h2>
{_percentile_chart("Queue wait by queue", by_queue, "queue", "wait")}
{_percentile_chart("Run time by queue", by_queue, "queue", "run")}
{_table(by_queue, "queue")}
<h2>By priority</h2>
{_percentile_chart("Queue wait by priority", by_priority, "priority", "wait")}
{_table(by_priority, "priority")}
<h2>By task</h2>
{_table(summary.get("by_task", []), "task")}
<h2>Top errors</h2>
{_errors(summary.get("top_errors", []))}
<h2>Events</h2>
{
        f"<table><tr><th>event</th><th>count</th></tr>{event_rows}</table>"
        if events
        else '<p class="muted">no live events read</p>'
    }
<p class="muted">Queue wait = started_at − run_at of the latest attempt; run time =
finished_at − started_at. Rates are shares of jobs: retry = more than one attempt,
stall = at least one stall. Report format version {summary.get("report_version")}.</p>
</body></html>
"""

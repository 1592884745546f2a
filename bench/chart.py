"""The chart of latest.json: matplotlib when it is installed (it is in .venv-bench),
else a plain PNG of bars written with zlib (no labels: the numbers are in latest.md).

    .venv-bench/bin/python -m bench.chart bench/results/latest.json bench/results/latest.png
"""

from __future__ import annotations

import json
import struct
import sys
import zlib
from pathlib import Path
from typing import Any

from bench.systems import ASYNC_CAPABLE

PANELS = (
    ("enqueue_single", "jobs_per_s", "enqueue one at a time, jobs/s"),
    ("enqueue_bulk", "jobs_per_s", "bulk enqueue, jobs/s"),
    ("process_1proc", "jobs_per_s", "1 worker process at defaults, jobs/s"),
    ("process_2proc", "jobs_per_s", "2 worker processes at defaults, jobs/s"),
    ("process_1proc_c100", "jobs_per_s", "1 worker process, async at concurrency 100, jobs/s"),
    ("process_2proc_c100", "jobs_per_s", "2 worker processes, async at concurrency 100, jobs/s"),
    ("latency", "p50_ms", "enqueue to start p50 / p99, ms (log)"),
    ("redis_memory", "bytes_per_job", "Redis bytes per waiting job"),
    ("process_1proc_net_c100", "jobs_per_s", "+1 ms each way: 1 worker process (c100), jobs/s"),
)
SUBJECT = "conveyor"


def series(doc: dict[str, Any], scenario: str, key: str) -> list[tuple[str, float, float | None]]:
    """(label, value, second value) per system, best first. In the equal-concurrency panels
    a thread-pool peer shows its defaults' figure, as in the ratios."""
    rows = []
    for rec in doc["records"]:
        if rec["scenario"] == scenario and rec.get(key) is not None:
            second = rec.get("p99_ms") if scenario.startswith("latency") else None
            rows.append((rec["system"], float(rec[key]), second))
        stands_in = scenario.endswith("_c100") and rec["scenario"] == scenario[: -len("_c100")]
        if stands_in and rec["system"] not in ASYNC_CAPABLE and rec.get(key) is not None:
            rows.append((f"{rec['system']} (defaults)", float(rec[key]), None))
        async_row = scenario == "enqueue_single" and rec["scenario"] == "enqueue_single_async"
        if async_row and rec["system"] == SUBJECT and rec.get(key) is not None:
            rows.append((f"{SUBJECT} (async)", float(rec[key]), None))
    lower_better = scenario.startswith(("latency", "redis_memory"))
    return sorted(rows, key=lambda r: r[1], reverse=not lower_better)


def matplotlib_chart(doc: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 3, figsize=(17, 14))
    for ax, (scenario, key, title) in zip(axes.flat, PANELS, strict=True):
        rows = series(doc, scenario, key)
        if not rows:
            ax.set_title(title + " (no data)")
            ax.axis("off")
            continue
        labels = [r[0] for r in rows]
        values = [r[1] for r in rows]
        colors = ["#d9480f" if label.startswith(SUBJECT) else "#4c6ef5" for label in labels]
        y = range(len(rows))
        ax.barh(list(y), values, color=colors)
        if scenario.startswith("latency"):
            p99 = [r[2] or 0 for r in rows]
            ax.scatter(p99, list(y), marker="|", s=200, color="black", label="p99")
            ax.set_xscale("log")
            ax.legend(loc="lower right", fontsize=8)
        for i, v in enumerate(values):
            ax.text(v, i, f" {v:,.0f}" if v >= 10 else f" {v:.2f}", va="center", fontsize=8)
        ax.set_yticks(list(y), labels, fontsize=9)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=10)
        ax.margins(x=0.25)
    meta = doc["meta"]
    fig.suptitle(
        f"Conveyor vs peers — {meta['cpus']} CPUs, private redis-server, medians of "
        f"{meta['reps']} rep(s) ({meta.get('enqueue_reps', meta['reps'])} of single enqueues), "
        f"N={meta['n']:,} (bench/README.md)",
        fontsize=12,
    )
    fig.tight_layout()
    fig.savefig(out, dpi=90)


def plain_chart(doc: dict[str, Any], out: Path) -> None:
    """Nine panels of horizontal bars; Conveyor orange, peers blue. No text."""
    width, height = 900, 900
    pixels = bytearray([255] * (width * height * 3))

    def rect(x0: int, y0: int, x1: int, y1: int, rgb: tuple[int, int, int]) -> None:
        for y in range(max(0, y0), min(height, y1)):
            row = y * width * 3
            for x in range(max(0, x0), min(width, x1)):
                pixels[row + 3 * x : row + 3 * x + 3] = bytes(rgb)

    for i, (scenario, key, _) in enumerate(PANELS):
        px, py = (i % 3) * 300 + 10, (i // 3) * 300 + 10
        rect(px, py, px + 280, py + 1, (0, 0, 0))
        rows = series(doc, scenario, key)
        if not rows:
            continue
        top = max(r[1] for r in rows) or 1.0
        bar = max(4, min(24, 270 // len(rows)))
        for j, (label, value, _) in enumerate(rows):
            color = (217, 72, 15) if label.startswith(SUBJECT) else (76, 110, 245)
            y = py + 8 + j * bar
            rect(px, y, px + max(1, int(270 * value / top)), y + bar - 3, color)
    raw = b"".join(
        b"\x00" + bytes(pixels[y * width * 3 : (y + 1) * width * 3]) for y in range(height)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw, 6))
        + chunk(b"IEND", b"")
    )
    out.write_bytes(png)


def main(argv: list[str]) -> None:
    doc = json.loads(Path(argv[0]).read_text())
    try:
        matplotlib_chart(doc, Path(argv[1]))
    except ImportError:
        plain_chart(doc, Path(argv[1]))


if __name__ == "__main__":
    main(sys.argv[1:])

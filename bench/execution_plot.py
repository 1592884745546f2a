"""Draw `python -m bench.execution`'s auto-concurrency trace (needs only matplotlib):

python -m bench.execution_plot execution.json execution.png
"""

from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(source: str, target: str) -> None:
    with open(source) as f:
        result = json.load(f)
    auto = result["auto"]["auto"]
    fixed = {k: v["jobs_per_s"] for k, v in result["auto"].items()}
    cores = result.get("cpus") or 1
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    trace = auto.get("cpu_trace", [])
    times = [t for t, _, _ in trace]
    bottom.plot(times, [h for _, h, _ in trace], label="host CPU %")
    bottom.plot(times, [o / cores for _, _, o in trace], label="worker + children, % of host")
    bottom.set_xlabel("s since the worker started")
    bottom.set_ylim(0, 105)
    bottom.legend(loc="lower right")
    t0 = auto.get("started_wall")
    points = [(0.0, 1)] + [(at - t0, limit) for at, limit in auto.get("limit_at", [])] if t0 else []
    if points:
        points.append((times[-1] if times else points[-1][0], points[-1][1]))
        top.step([p[0] for p in points], [p[1] for p in points], where="post", label="auto limit")
    top.set_ylabel("concurrency")
    top.set_title(
        "jobs/s: "
        + ", ".join(f"{k}: {v:.0f}" for k, v in fixed.items() if v is not None)
        + " (indicative only)"
    )
    top.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(target)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

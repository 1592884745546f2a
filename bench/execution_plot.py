"""Draw `python -m bench.execution`'s auto-concurrency traces (needs only matplotlib):
one row per load, the auto worker's limit above, the host's and its own CPU below.

python -m bench.execution_plot execution.json execution.png
"""

from __future__ import annotations

import json
import sys
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _row(top: Any, bottom: Any, load: str, runs: dict[str, Any], cores: int) -> None:
    auto = runs["auto"]
    trace = auto.get("cpu_trace", [])
    times = [t for t, _, _ in trace]
    bottom.plot(times, [h for _, h, _ in trace], label="host CPU %")
    bottom.plot(times, [o / cores for _, _, o in trace], label="worker + children, % of host")
    bottom.set_ylim(0, 105)
    bottom.legend(loc="lower right", fontsize="small")
    t0 = auto.get("started_wall")
    points = [(0.0, 1)] + [(at - t0, limit) for at, limit in auto.get("limit_at", [])] if t0 else []
    if points:
        points.append((times[-1] if times else points[-1][0], points[-1][1]))
        top.step([p[0] for p in points], [p[1] for p in points], where="post", label="auto limit")
    top.set_ylabel("concurrency")
    fixed = {k: v["jobs_per_s"] for k, v in runs.items()}
    top.set_title(
        f"{load}, jobs/s: " + ", ".join(f"{k}: {v:.0f}" for k, v in fixed.items() if v is not None),
        fontsize="small",
    )


def main(source: str, target: str) -> None:
    with open(source) as f:
        result = json.load(f)
    loads = result["auto"]
    cores = result.get("cpus") or 1
    fig, axes = plt.subplots(2 * len(loads), 1, figsize=(9, 4 * len(loads)), sharex=True)
    for i, (load, runs) in enumerate(loads.items()):
        _row(axes[2 * i], axes[2 * i + 1], load, runs, cores)
    axes[-1].set_xlabel("s since the worker started (indicative only)")
    fig.tight_layout()
    fig.savefig(target)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

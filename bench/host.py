"""Was the run's host quiet? Its own `ceiling` against the quiet host's (bench/README.md,
"Judging a host before a run").

The timing targets were set and met on a quiet 2-core host. Hosts differ
more than a Python loop shows: on some, Redis's scripts run at a third of that speed while
Python runs as fast, and a Redis-bound figure (two worker processes, Redis CPU per job)
then says more about the host than about the code. The ceiling scenario measures the two
figures that tell: pipelined `HSET` (Redis's own command speed) and `claim` of 100 jobs a
call (its Lua). A host within `TOLERANCE` of the quiet host on both, or faster, is quiet.
"""

from __future__ import annotations

from statistics import median
from typing import Any

# Medians of the three ceiling reps of the full run in results/latest.json, on a quiet host
QUIET_HOST = {"hset_pipelined": 1_136_364.0, "claim_100": 149_701.0}
TOLERANCE = 0.15
LABELS = {
    "hset_pipelined": "pipelined `HSET` (50 clients, 16 a request) requests/s",
    "claim_100": "`claim` of 100 a call jobs/s",
}


def judge(ceiling_runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The verdict from the ceiling's runs, or None when none has the figures."""
    details = [r["detail"] for r in ceiling_runs if "error" not in r and r.get("detail")]
    hset = [d["commands"]["c50_P16"]["HSET"] for d in details if "c50_P16" in d["commands"]]
    claim = [
        d["scripts"]["claim 100/call"]["jobs_per_s"]
        for d in details
        if "claim 100/call" in d["scripts"]
    ]
    if not hset or not claim:
        return None
    measured = {"hset_pipelined": median(hset), "claim_100": median(claim)}
    share = {name: measured[name] / QUIET_HOST[name] for name in QUIET_HOST}
    return {
        "measured": measured,
        "quiet_host": QUIET_HOST,
        "share_of_quiet": share,
        "tolerance": TOLERANCE,
        "quiet": all(s >= 1 - TOLERANCE for s in share.values()),
    }


def sentence(verdict: dict[str, Any] | None) -> str:
    """One line for latest.md."""
    if verdict is None:
        return "Host: not judged (the run has no `ceiling` with `claim` of 100 a call)."
    figures = " and ".join(
        f"{LABELS[name]} {verdict['measured'][name]:,.0f} ({verdict['share_of_quiet'][name]:.0%}"
        f" of the quiet host's {QUIET_HOST[name]:,.0f})"
        for name in QUIET_HOST
    )
    if verdict["quiet"]:
        return f"Host: {figures}: **a quiet host** (within {TOLERANCE:.0%} of both)."
    return (
        f"Host: {figures}: **not a quiet host**, so its timing figures are indicative, not "
        'the official ones (bench/README.md, "Judging a host before a run").'
    )

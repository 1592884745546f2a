"""The truth mix and its checks, shared by tests/test_truth.py (bounded) and
scenario 37 (full size): a realistic mix run by real worker processes, one of
them killed mid-run, then a queue and a group paused; every number an operator
sees (the client, the CLI's --json, the dashboard's pages and /metrics) is
checked against a ledger kept here."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from conveyor import FlowJob, JobRequest, JobState, Queue
from conveyor.integrations.cli import main
from conveyor.integrations.web import DashboardSettings, dashboard_app

ROOT = Path(__file__).resolve().parents[1]
Check = Callable[[str, bool, object], object]  # (what, ok, detail)


def _spawn(url: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "conveyor.integrations.cli", "worker",
               "chaos.truth_app:tasks", "--url", url, "--lease", "1"]  # fmt: skip
    path = os.pathsep.join([str(ROOT), str(ROOT / "src")])
    return subprocess.Popen(
        command, env={**os.environ, "PYTHONPATH": path, **env}, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
    proc.communicate(timeout=60)


def _until(predicate: Callable[[], object], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def _cli(*args: str, url: str) -> Any:
    shown = CliRunner().invoke(main, [*args, "--url", url])
    if shown.exit_code != 0:
        raise RuntimeError(f"conveyor {' '.join(args)}: {shown.output}")
    return json.loads(shown.stdout)


def run_truth(url: str, queue: str, workdir: Path, check: Check, *, scale: int = 1) -> None:
    """Run the mix `scale` times over on `queue`, then check every number (`check` is
    told each one: a test asserts, a chaos scenario records)."""
    q = Queue(queue, url=url)
    try:
        completed, failed, first_id = _run_mix(q, url, workdir, check, scale)
        _check_numbers(q, url, check, scale=scale, completed=completed, failed=failed,
                       first_id=first_id)  # fmt: skip
    finally:
        q.close()


def _run_mix(q: Queue, url: str, workdir: Path, check: Check, scale: int) -> tuple[int, int, str]:
    env = {"TEST_QUEUE": q.name, "TEST_MARK": str(workdir / "mark")}
    q.enqueue("sleepy", {"seconds": 3}, id="sleepy")  # alone: the killed worker runs only it
    first = _spawn(url, env)
    second = None
    try:
        check("the first worker started the slow job", _until((workdir / "mark").exists, 60), "")
        first_id = q.get("sleepy").worker or ""  # type: ignore[union-attr]
        os.killpg(first.pid, signal.SIGKILL)  # mid-run: its lease expires, a reaper recovers it
        first.wait(10)
        groups: list[dict[str, Any]] = [{"group": "g1"}, {"group": "g2"}, {}]
        q.enqueue_many([JobRequest("ok", n, groups[n % 3]) for n in range(30 * scale)])
        q.enqueue_many([("flaky", n) for n in range(5 * scale)])
        q.enqueue_many([("doomed", n) for n in range(3 * scale)])
        for i in range(scale):
            q.enqueue_flow(FlowJob(task="report", options={"id": f"rep{i}"},
                                   children=[FlowJob(task="part", data="bad"),
                                             FlowJob(task="part", data="good")]))  # fmt: skip
        # ok, flaky, the good parts, sleepy (second run); doomed, the bad parts, their parents
        completed, failed = (30 + 5 + 1) * scale + 1, (3 + 1 + 1) * scale
        second = _spawn(url, env)
        done = (completed, failed)
        check(
            "the mix ended as the ledger says",
            _until(
                lambda: (q.counts()[JobState.COMPLETED], q.counts()[JobState.FAILED]) == done,
                60 + 3 * scale,
            ),  # fmt: skip
            q.counts(),
        )
        _until(lambda: q.totals()["completed"] == completed, 30)
    finally:
        _stop(first)
        if second is not None:
            _stop(second, signal.SIGTERM)  # its last flush of counts
    return completed, failed, first_id


def _check_numbers(
    q: Queue, url: str, check: Check, *, scale: int, completed: int, failed: int, first_id: str
) -> None:
    name = q.name
    _cli("pause", name, "--json", url=url)
    _cli("pause", name, "--group", "g1", "--json", url=url)
    q.enqueue_many([JobRequest("ok", n, {"group": "g1"}) for n in range(4)])
    q.enqueue_many([("ok", n) for n in range(2)])
    counts = {"waiting": 6, "delayed": 0, "active": 0, "completed": completed, "failed": failed,
              "blocked": 0, "waiting_children": 0}  # fmt: skip
    # retried: each flaky job once, and the slow job its killed worker left (a stall re-runs)
    totals = {"completed": completed, "failed": failed, "retried": 5 * scale + 1, "stalled": 1}

    # the client
    seen = {s.value: n for s, n in q.counts().items()}
    check("Queue.counts() matches the ledger", seen == counts, seen)
    check("Queue.totals() matches the ledger", q.totals() == totals, q.totals())
    view = q.overview()
    groups = {g.name: (g.waiting, g.paused) for g in view.groups}
    check("the overview: queue and group g1 paused", view.paused and groups == {"g1": (4, True)},
          groups)  # fmt: skip
    # the CLI, in JSON
    rows = [r for r in _cli("queues", "--json", url=url) if r["queue"] == name]
    check("conveyor queues --json", [(r["counts"], r["paused"]) for r in rows] == [(counts, True)],
          rows)  # fmt: skip
    info = _cli("info", name, url=url)["counts"]
    check("conveyor info", info == counts, info)
    waiting = _cli("jobs", "list", name, "waiting", "--json", url=url)
    in_g1 = sum(1 for r in waiting if r["group"] == "g1")
    check("jobs list waiting: every waiting job, grouped ones too", (len(waiting), in_g1) == (6, 4),
          waiting)  # fmt: skip
    g1 = _cli("jobs", "list", name, "--group", "g1", "--json", url=url)
    check("jobs list --group g1", len(g1) == 4, g1)
    failed_rows = _cli("jobs", "list", name, "failed", "--json", "--limit", str(failed + 10),
                       url=url)  # fmt: skip
    parents = {f"rep{i}" for i in range(scale)}
    check("jobs list failed: the flow parents included",
          len(failed_rows) == failed and parents <= {r["id"] for r in failed_rows},
          len(failed_rows))  # fmt: skip
    runs = _cli("jobs", "show", name, "sleepy", "--json", url=url)["runs"]
    check("jobs show: the killed run, then the completed one",
          [r["outcome"] for r in runs] == ["stalled", "completed"]
          and runs[0]["worker"] == first_id != runs[1]["worker"], runs)  # fmt: skip
    _check_dashboard(url, name, check, failed, counts, totals)
    # quantiles: never above the largest measured
    for timing in q.task_timings():
        for histogram in (timing.run, timing.wait):
            if histogram.count:
                quantiles = [histogram.quantile(x) for x in (0.5, 0.95, 0.99, 1)]
                check(f"{timing.task}: no quantile above the largest measured",
                      histogram.max is not None and all(x <= histogram.max for x in quantiles),
                      (quantiles, histogram.max))  # fmt: skip


def _check_dashboard(
    url: str, name: str, check: Check, failed: int, counts: dict[str, int], totals: dict[str, int]
) -> None:
    pages = asyncio.run(_pages(url, name))
    waiting = pages["waiting"]
    check("dashboard: the waiting page lists 6 jobs",
          "6 waiting job(s)" in waiting
          and waiting.count('<td class="state-waiting">waiting</td>') == 6, "")  # fmt: skip
    check("dashboard: group g1's waiting page", "4 waiting job(s)" in pages["g1"], "")
    check("dashboard: the failed page", f"{failed} failed job(s)" in pages["failed"], "")
    samples = {
        (s.name, s.labels.get("state") or s.labels.get("outcome")): s.value
        for family in text_string_to_metric_families(pages["metrics"])
        for s in family.samples
        if s.labels.get("queue") == name
    }
    for state, n in counts.items():
        found = samples.get(("conveyor_queue_jobs", state))
        check(f"/metrics conveyor_queue_jobs{{state={state}}}", found == n, found)
    for outcome, n in totals.items():
        found = samples.get(("conveyor_queue_outcomes_total", outcome))
        check(f"/metrics conveyor_queue_outcomes_total{{outcome={outcome}}}", found == n, found)


async def _pages(url: str, name: str) -> dict[str, str]:
    app = dashboard_app(DashboardSettings(url=url, queues=(name,)))
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://dash.test") as web:
            return {
                "waiting": (await web.get(f"/queues/{name}/jobs/waiting")).text,
                "g1": (await web.get(f"/queues/{name}/jobs/waiting?group=g1")).text,
                "failed": (await web.get(f"/queues/{name}/jobs/failed")).text,
                "metrics": (await web.get("/metrics")).text,
            }
    finally:
        await app.state.queues.close()

"""The shipped Prometheus alert rules and Grafana dashboard (deploy/): valid for promtool, the
alerts fire on what they say, and every series they read is one a real worker exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from conveyor import Queue, Tasks
from conveyor.integrations.prometheus import PrometheusHook, QueueCollector
from conveyor.worker import Worker, WorkerSettings

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
ALERTS = DEPLOY / "prometheus" / "conveyor-alerts.yml"
DASHBOARD = DEPLOY / "grafana" / "conveyor-dashboard.json"

_SELECTOR = re.compile(r"\b(conveyor_[a-z_]+)(?:\{([^}]*)\})?")
_MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: apt-get install prometheus (make tools does it as root)")
    return path


def alert_exprs() -> list[str]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel["targets"]]


def exported_samples(url: str, queue: str) -> list[tuple[str, dict[str, str]]]:
    """Every sample a worker's endpoint serves after jobs completed, failed and retried."""
    tasks = Tasks(queue, url=url)

    @tasks.task
    def ok(data: Any) -> int:
        return 1

    @tasks.task(max_failures=1)
    def broken(data: Any) -> None:
        raise ValueError("broken")

    @tasks.task(max_failures=2, min_backoff=60)
    def flaky(data: Any) -> None:
        raise ValueError("flaky")

    registry = CollectorRegistry()
    hook = PrometheusHook(registry)
    with Queue(queue, url=url) as client:
        registry.register(QueueCollector([client]))
        for task in (ok, broken, flaky):
            task.enqueue(None)
        Worker(tasks, url=url, hooks=[hook], settings=WorkerSettings(burst=True)).run_sync()
        # what a clean run does not reach: the reaper's count and a fenced-off write's
        hook.on_stalled(recovered=1, failed=0, queue=queue)
        hook.on_lease_lost(SimpleNamespace(queue=queue, task="ok"))  # type: ignore[arg-type]
        return [(s.name, s.labels) for family in registry.collect() for s in family.samples]


def test_the_alert_rules_are_valid_for_promtool() -> None:
    done = subprocess.run(
        [promtool(), "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 8 rules found" in done.stdout


def test_the_alerts_fire_on_what_they_say(tmp_path: Path) -> None:
    waiting = 'conveyor_queue_jobs{queue="%s", state="waiting", instance="w"}'
    workers = 'conveyor_queue_live_workers{queue="%s", instance="w"}'
    jobs = 'conveyor_worker_jobs_total{queue="a", task="t", outcome="%s", instance="w"}'
    stalled = 'conveyor_worker_stalled_total{queue="%s", instance="w"}'
    oldest = 'conveyor_queue_oldest_waiting_seconds{queue="%s", instance="w"}'
    paused = 'conveyor_queue_paused{queue="%s", instance="w"}'
    per_minute = 'conveyor_queue_completed_per_minute{queue="%s", instance="w"}'
    cases = {
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": waiting % "a", "values": "5x30"},
                    {"series": workers % "a", "values": "0x30"},
                    {"series": waiting % "b", "values": "5x30"},  # b has a worker: no alert
                    {"series": workers % "b", "values": "1x30"},
                    {"series": jobs % "completed", "values": "0+10x30"},
                    {"series": jobs % "failed", "values": "0+10x30"},  # half of them fail
                    {"series": stalled % "a", "values": "0 0 0 0 0 3 3 3"},
                    {"series": stalled % "b", "values": "0x30"},
                    # c: a backlog 10 minutes old, a live worker, nothing completed: stuck
                    {"series": oldest % "c", "values": "600+60x30"},
                    {"series": workers % "c", "values": "1x30"},
                    {"series": paused % "c", "values": "0x30"},
                    {"series": per_minute % "c", "values": "0x30"},
                    # d: as old, but it completes jobs: only its latency alerts
                    {"series": oldest % "d", "values": "600+60x30"},
                    {"series": workers % "d", "values": "1x30"},
                    {"series": paused % "d", "values": "0x30"},
                    {"series": per_minute % "d", "values": "12x30"},
                ],
                "alert_rule_test": [
                    {
                        "eval_time": "5m",
                        "alertname": "ConveyorNoLiveWorkers",
                        "exp_alerts": [
                            {
                                "exp_labels": {"queue": "a", "severity": "critical"},
                                "exp_annotations": {
                                    "summary": "Jobs wait in a and no worker is in its roll call"
                                },
                            }
                        ],
                    },
                    {"eval_time": "1m", "alertname": "ConveyorNoLiveWorkers", "exp_alerts": []},
                    {
                        "eval_time": "10m",
                        "alertname": "ConveyorQueueStuck",
                        "exp_alerts": [
                            {
                                "exp_labels": {"queue": "c", "severity": "critical"},
                                "exp_annotations": {
                                    "summary": "c has waiting jobs and live workers but "
                                    "completes nothing"
                                },
                            }
                        ],
                    },
                    {
                        "eval_time": "15m",
                        "alertname": "ConveyorLatencyHigh",
                        "exp_alerts": [
                            {
                                "exp_labels": {"queue": q, "severity": "warning"},
                                "exp_annotations": {
                                    "summary": f"The next job of {q} has waited over 5 minutes"
                                },
                            }
                            for q in ("c", "d")
                        ],
                    },
                    {
                        "eval_time": "25m",
                        "alertname": "ConveyorFailures",
                        "exp_alerts": [
                            {
                                "exp_labels": {"queue": "a", "severity": "warning"},
                                "exp_annotations": {"summary": "Over 5% of a's jobs fail for good"},
                            }
                        ],
                    },
                    {
                        "eval_time": "7m",
                        "alertname": "ConveyorWorkersDying",
                        "exp_alerts": [
                            {
                                "exp_labels": {"queue": "a", "severity": "warning"},
                                "exp_annotations": {
                                    "summary": "Workers of a died or hung under their jobs "
                                    "(stalled jobs)"
                                },
                            }
                        ],
                    },
                ],
            }
        ],
        "rule_files": [str(ALERTS)],
    }
    spec = tmp_path / "alerts.test.yml"
    spec.write_text(yaml.safe_dump(cases))
    done = subprocess.run(
        [promtool(), "test", "rules", str(spec)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_series_the_rules_and_the_dashboard_read_is_exported(
    redis_url: str, queue_name: str
) -> None:
    samples = exported_samples(redis_url, queue_name)
    names = {name for name, _ in samples}
    assert {"conveyor_worker_jobs_total", "conveyor_queue_jobs"} <= names  # the run exported
    problems = []
    exprs = alert_exprs() + dashboard_exprs()
    assert len(exprs) >= 15
    for expr in exprs:
        for name, matchers in _SELECTOR.findall(expr):
            if name not in names:
                problems.append(f"{name}: no such series ({expr})")
                continue
            labels = [s for n, s in samples if n == name]
            for key, op, value in _MATCHER.findall(matchers):
                if not any(key in s for s in labels):
                    problems.append(f"{name}: no label {key!r}")
                elif op == "=" and not any(s.get(key) == value for s in labels):
                    problems.append(f"{name}: no sample with {key}={value!r}")
                elif op == "=~" and "$" not in value:
                    pattern = re.compile(value)
                    wanted = value.split("|")
                    seen = {s[key] for s in labels if pattern.fullmatch(s[key])}
                    if not set(wanted) <= seen:
                        problems.append(f"{name}: {key}=~{value!r} matches only {sorted(seen)}")
    assert not problems, problems


def test_the_dashboard_is_grafana_json_with_a_queue_variable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["queue"]["query"]["query"] == "label_values(conveyor_queue_jobs, queue)"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)) >= 6
    for panel in dashboard["panels"]:
        assert all('queue=~"$queue"' in t["expr"] for t in panel["targets"]), panel["title"]

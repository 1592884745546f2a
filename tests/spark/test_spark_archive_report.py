"""Archive (copy to Parquet, then remove; re-runs are safe), report, and the pipeline."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="PySpark is not installed: pip install -e '.[spark]'")

from conveyor import JobRequest, JobState, PermanentError, Queue, QueueSettings  # noqa: E402
from conveyor.client.tasks import Tasks  # noqa: E402

pytestmark = pytest.mark.spark

SETTINGS = QueueSettings(events_maxlen=100_000)


def _finish(url: str, queue: str, runner: Any, ids: list[str]) -> None:
    from support.workers import wait_until

    tasks = Tasks(queue, settings=SETTINGS)

    @tasks.task(name="work")
    def work(data: int) -> int:
        if data % 10 == 0:
            raise PermanentError(f"item {data} rejected")
        return data * 2

    with Queue(queue, url=url, settings=SETTINGS) as q:
        before = q.counts()
        q.enqueue_many([JobRequest("work", n, {"id": i}) for n, i in enumerate(ids)])
        handle = runner.start(tasks, concurrency=8)
        done = before[JobState.COMPLETED] + before[JobState.FAILED] + len(ids)
        wait_until(
            lambda: q.counts()[JobState.COMPLETED] + q.counts()[JobState.FAILED] == done,
            timeout=30,
        )
        handle.stop()


def test_archive_moves_finished_jobs_and_reruns_are_safe(
    spark: Any, redis_url: str, queue_name: str, worker_runner: Any, tmp_path: Path
) -> None:
    from conveyor.integrations.spark.archive import archive

    path = str(tmp_path / "archive")
    _finish(redis_url, queue_name, worker_runner, [f"a{n}" for n in range(300)])
    with Queue(queue_name, url=redis_url) as q:
        q.enqueue("work", 1, id="still-waiting", delay=3600)
        # Crash right after the Parquet commit, before anything is removed from Redis.
        with pytest.raises(RuntimeError, match="fail_after_write"):
            archive(spark, redis_url, path, [queue_name], fail_after_write=True)
        assert q.counts()[JobState.COMPLETED] + q.counts()[JobState.FAILED] == 300
        assert spark.read.parquet(path).count() == 300

        # The re-run first finishes the crashed run's removals, then finds nothing new.
        (result,) = archive(spark, redis_url, path, [queue_name])
        assert (result.recovered_runs, result.removed, result.archived) == (1, 300, 0)
        counts = q.counts()
        assert counts[JobState.COMPLETED] + counts[JobState.FAILED] == 0
        assert counts[JobState.DELAYED] == 1 and q.get("a1") is None

        # on_commit sees this run's rows committed and its jobs not yet removed
        _finish(redis_url, queue_name, worker_runner, [f"b{n}" for n in range(50)])
        seen: list[tuple[str, int, int]] = []

        def committed(queue: str) -> None:
            counts = q.counts()
            ids = spark.read.parquet(path).where("id LIKE 'b%'").count()
            seen.append((queue, ids, counts[JobState.COMPLETED] + counts[JobState.FAILED]))

        (result,) = archive(spark, redis_url, path, [queue_name], on_commit=committed)
        assert (result.recovered_runs, result.removed, result.archived) == (0, 50, 50)
        assert seen == [(queue_name, 50, 50)]

    # the copy's concurrent writers were set for it alone
    from conveyor.integrations.spark.archive import WRITERS_CONF

    assert spark.conf.get(WRITERS_CONF, None) is None
    spark.conf.set(WRITERS_CONF, "1")  # a session's own choice is left alone
    try:
        (result,) = archive(spark, redis_url, path, [queue_name])
        assert result.archived == 0 and spark.conf.get(WRITERS_CONF) == "1"
    finally:
        spark.conf.unset(WRITERS_CONF)
    data = spark.read.parquet(path)
    rows = data.select("id", "state", "queue", "day", "finished_at", "result").collect()
    assert len(rows) == 350 and len({r["id"] for r in rows}) == 350
    assert {r["queue"] for r in rows} == {queue_name}
    assert {r["state"] for r in rows} == {"completed", "failed"}
    assert all(str(r["day"]) == r["finished_at"].strftime("%Y-%m-%d") for r in rows)
    assert (tmp_path / "archive" / f"queue={queue_name}").is_dir()


def _well_formed_svgs(html: str) -> int:
    count = 0
    for chunk in html.split("<svg")[1:]:
        ET.fromstring("<svg" + chunk.split("</svg>")[0] + "</svg>")
        count += 1
    return count


def test_pipeline_end_to_end_writes_the_report(
    spark: Any, redis_url: str, queue_name: str, tmp_path: Path
) -> None:
    from conveyor.integrations.spark import run_pipeline

    lines: list[str] = []
    result = run_pipeline(
        spark, redis_url, 2000, queue=queue_name, out_dir=str(tmp_path / "out"),
        workers=1, say=lines.append,
    )  # fmt: skip
    assert result.steps["archive"]["rows"] == result.steps["archive"]["removed"] == 2000
    events = result.steps["report"]["by_event"]
    assert events["created"] == 2000 and events["active"] >= 2000
    assert any(line.startswith("report: ") for line in lines)

    summary = json.loads(Path(result.report_json or "").read_text())
    assert summary["totals"]["jobs"] == 2000
    assert 0 < summary["totals"]["retry_rate"] < 0.1
    assert {row["priority"] for row in summary["by_priority"]} == {"0", "1000", "2000"}
    assert summary["by_queue"][0]["wait_p50"] is not None
    assert summary["throughput"]["series"]
    # every job started inside the throughput window: the latency series counts each once
    assert sum(point["started"] for point in summary["latency"]) == 2000
    assert len(summary["latency"]) == len(summary["throughput"]["series"])
    assert any(point["wait_p50"] is not None for point in summary["latency"])
    assert summary["top_errors"][0]["error"].startswith("ConnectionError")
    html = Path(result.report_html or "").read_text()
    assert "<h1>Conveyor report</h1>" in html and _well_formed_svgs(html) >= 3
    with Queue(queue_name, url=redis_url) as q:
        assert sum(q.counts().values()) == 0  # archived, then removed
    archive_path = str(tmp_path / "out" / "archive")
    ids = spark.read.parquet(archive_path).select("id").distinct().count()
    assert ids == spark.read.parquet(archive_path).count() == 2000  # each job once

    # The report overlapped the archive: the same numbers as a report run after it.
    from conveyor.integrations.spark.report import report

    after = report(spark, str(tmp_path / "r1"), archive_path=archive_path, url=redis_url,
                   queues=[queue_name], live_jobs=False)  # fmt: skip
    volatile = ("generated_at", "seconds")
    assert {k: v for k, v in after.summary.items() if k not in volatile} == {
        k: v for k, v in summary.items() if k not in volatile
    }

    # Without events, the throughput and the errors come from the archived jobs.
    archived = report(spark, str(tmp_path / "r2"), archive_path=archive_path)
    again = json.loads(Path(archived.json).read_text())
    assert again["totals"] == summary["totals"] and "events" not in again
    finished = sum(sum(v for k, v in p.items() if k != "t") for p in again["throughput"]["series"])
    assert finished == 2000
    blocked = [e for e in again["top_errors"] if "customer # is blocked" in e["error"]]
    assert sum(e["count"] for e in blocked) == again["totals"]["failed"]  # ~0.1%: maybe none
    assert all(e["events"] == ["failed"] for e in blocked)


def test_report_counts_a_job_archived_and_still_live_once(
    spark: Any, redis_url: str, queue_name: str, worker_runner: Any, tmp_path: Path
) -> None:
    """An archive that stopped after its Parquet commit leaves its jobs in Redis too: the
    report over the archive and the live queue counts each of them once."""
    from conveyor.integrations.spark.archive import archive
    from conveyor.integrations.spark.report import report

    path = str(tmp_path / "archive")
    _finish(redis_url, queue_name, worker_runner, [f"c{n}" for n in range(40)])
    with pytest.raises(RuntimeError, match="fail_after_write"):
        archive(spark, redis_url, path, [queue_name], fail_after_write=True)
    assert spark.read.parquet(path).count() == 40

    both = report(spark, str(tmp_path / "both"), archive_path=path, url=redis_url,
                  queues=[queue_name])  # fmt: skip
    alone = report(spark, str(tmp_path / "alone"), archive_path=path)
    live = report(spark, str(tmp_path / "live"), url=redis_url, queues=[queue_name])
    for paths in (both, alone, live):
        assert paths.summary["totals"]["jobs"] == 40
        assert paths.summary["totals"]["failed"] == 4  # items 0, 10, 20, 30


def test_report_errors_count_failed_jobs_whose_events_were_trimmed(
    spark: Any, redis_url: str, queue_name: str, worker_runner: Any, tmp_path: Path
) -> None:
    """The events stream is capped: under load a failure's event is trimmed long before
    the failed job goes. The top errors still count every failed job, and the retries'
    errors still come from the events."""
    from conveyor.integrations.spark.report import report

    _finish(redis_url, queue_name, worker_runner, [f"t{n}" for n in range(40)])
    with Queue(queue_name, url=redis_url, settings=SETTINGS) as q:
        key = q.core.keys.events
        failed = [i for i, f in q.client.xrange(key) if f[b"event"] == b"failed"]
        assert len(failed) == 4
        q.client.xdel(key, *failed)  # as the cap would have trimmed them
        q.client.xadd(key, {"event": "retried", "id": "t1", "error": "TimeoutError: slow 3"})

    paths = report(spark, str(tmp_path / "r"), url=redis_url, queues=[queue_name])
    assert paths.summary["totals"]["failed"] == 4
    assert paths.summary["top_errors"] == [
        {"error": "PermanentError: item # rejected", "count": 4, "events": ["failed"],
         "example": "PermanentError: item 0 rejected"},
        {"error": "TimeoutError: slow #", "count": 1, "events": ["retried"],
         "example": "TimeoutError: slow 3"},
    ]  # fmt: skip
    assert "item # rejected" in Path(paths.html).read_text()


def test_report_over_archive_only(spark: Any, redis_url: str, tmp_path: Path) -> None:
    from conveyor.integrations.spark.report import report

    paths = report(spark, str(tmp_path / "r"), archive_path=str(tmp_path / "missing"))
    assert json.loads(Path(paths.json).read_text())["throughput"]["series"] == []
    assert "no data" in Path(paths.html).read_text()


def test_pipeline_workers_yield_the_cpu_to_redis(redis_url: str, queue_name: str) -> None:
    """A demo worker lowers its own CPU priority before it runs (burst mode: an empty queue
    ends it at once), so that a Redis on the same cores runs whenever it can."""
    import os
    import subprocess
    import sys

    code = (
        "import os\n"
        "from conveyor.integrations.spark.pipeline import WORKER_NICENESS, _worker_main\n"
        "before = os.getpriority(os.PRIO_PROCESS, 0)\n"
        f"_worker_main({redis_url!r}, {queue_name!r}, 'conveyor', 10000, 4, WORKER_NICENESS)\n"
        "print(os.getpriority(os.PRIO_PROCESS, 0) - before, WORKER_NICENESS)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, check=True,
    )  # fmt: skip
    raised, niceness = map(int, done.stdout.split())
    assert niceness > 0 and raised == niceness


@pytest.mark.parametrize(("workers", "concurrency"), [(0, 64), (2, 0)])
def test_the_pipeline_refuses_workers_that_cannot_start(
    spark: Any, redis_url: str, queue_name: str, tmp_path: Path, workers: int, concurrency: int
) -> None:
    """A worker that cannot start would leave the drain restarting workers for ever: the
    pipeline says so before Spark writes a row."""
    from conveyor.errors import ConfigurationError
    from conveyor.integrations.spark import run_pipeline

    with pytest.raises(ConfigurationError, match="at least 1"):
        run_pipeline(spark, redis_url, 100, queue=queue_name, out_dir=str(tmp_path / "out"),
                     workers=workers, concurrency=concurrency, say=lambda _: None)  # fmt: skip
    with Queue(queue_name, url=redis_url) as q:
        assert sum(q.counts().values()) == 0
    assert not (tmp_path / "out").exists()

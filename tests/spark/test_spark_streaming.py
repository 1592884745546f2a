"""Structured Streaming: replay-safe enqueue, and the events stream as a source."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="PySpark is not installed: pip install -e '.[spark]'")

from conveyor import JobRequest, JobState, Queue, QueueSettings  # noqa: E402

pytestmark = pytest.mark.spark

SETTINGS = QueueSettings(events_maxlen=100_000)


def _json_file(directory: Path, name: str, start: int, count: int) -> None:
    lines = [json.dumps({"customer": n, "amount": n * 0.5}) for n in range(start, start + count)]
    (directory / name).write_text("\n".join(lines) + "\n")


def _forget_last_commit(checkpoint: Path) -> None:
    """Delete the newest commit record, as if the query died right before writing it:
    on restart Spark runs that micro-batch again."""
    commits = [p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]
    last = max(commits, key=lambda p: int(p.name))
    last.unlink()
    (last.parent / f".{last.name}.crc").unlink(missing_ok=True)


def test_streaming_write_is_replay_safe(
    spark: Any, redis_url: str, queue_name: str, tmp_path: Path
) -> None:
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    _json_file(source, "a.json", 0, 50)
    _json_file(source, "b.json", 50, 50)

    def run() -> None:
        stream = spark.readStream.schema("customer long, amount double").option(
            "maxFilesPerTrigger", 1
        )
        query = (
            stream.json(str(source))
            .writeStream.format("conveyor")
            .option("url", redis_url)
            .option("queue", queue_name)
            .option("task", "orders.process")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    run()
    with Queue(queue_name, url=redis_url) as q:
        assert q.counts()[JobState.WAITING] == 100
        # Forget that the last micro-batch was committed: Spark replays it on restart.
        _forget_last_commit(checkpoint)
        run()
        assert q.counts()[JobState.WAITING] == 100
        _json_file(source, "c.json", 100, 25)
        run()
        assert q.counts()[JobState.WAITING] == 125
        jobs = [q.get(e.job_id) for e in q.events(after="0-0", count=1000)]
        assert sorted(j.data["customer"] for j in jobs if j is not None) == list(range(125))


def test_events_stream_admission_restart_and_trim(
    spark: Any, redis_url: str, queue_name: str, tmp_path: Path, redis_client: Any
) -> None:
    from conveyor.integrations.spark import trim_events

    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"

    def run() -> list[int]:
        query = (
            spark.readStream.format("conveyor_events")
            .option("url", redis_url)
            .option("queue", queue_name)
            .option("maxEventsPerTrigger", 300)
            .option("consumerName", "analytics")
            .load()
            .writeStream.format("parquet")
            .option("path", str(sink))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

    with Queue(queue_name, url=redis_url, settings=SETTINGS) as q:
        q.enqueue_many([JobRequest("t", n, {"id": f"a{n}"}) for n in range(1000)])
        assert run() == [300, 300, 300, 100]
        q.enqueue_many([JobRequest("t", n, {"id": f"b{n}"}) for n in range(500)])
        _forget_last_commit(checkpoint)  # the restart replays the last batch too
        assert sum(run()) >= 500
        rows = spark.read.parquet(str(sink)).select("stream_id", "job_id", "event").collect()
        assert len(rows) == 1500 and len({r["stream_id"] for r in rows}) == 1500
        assert {r["event"] for r in rows} == {"created"}

        # Spark commits a source's offsets when the next micro-batch starts, so the recorded
        # position may lag the sink by one batch (never run ahead of it).
        events_key = q.core.keys.events
        ids = [e[0].decode() for e in redis_client.xrange(events_key)]
        stored = redis_client.hget(f"conveyor:{{{queue_name}}}:consumers", "analytics").decode()
        assert stored in ids and ids.index(stored) >= 1000 - 1
        q.enqueue_many([JobRequest("t", n, {"id": f"c{n}"}) for n in range(10)])
        unread = len(ids) - ids.index(stored) - 1 + 10
        assert trim_events(redis_url, queue_name) == ids.index(stored) + 1
        assert redis_client.xlen(events_key) == unread  # what the consumer has not read stays
        assert trim_events(redis_url, queue_name) == 0
        shutil.rmtree(checkpoint)

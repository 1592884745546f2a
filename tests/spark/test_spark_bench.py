"""The Spark benchmark's own counts (`conveyor.integrations.spark.bench`)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark", reason="PySpark is not installed: pip install -e '.[spark]'")

from conveyor import JobRequest, Queue  # noqa: E402

pytestmark = pytest.mark.spark


def test_the_events_rate_counts_job_events_not_stream_entries(
    spark: Any, redis_client: Any, redis_url: str, queue_name: str
) -> None:
    """A bulk call writes one entry naming its jobs (protocol §11): the events read's
    rows/s divides the rows the read gives, not `XLEN`; an entry naming no job is a row."""
    from conveyor.integrations.spark.bench import _job_events

    with Queue(queue_name, url=redis_url) as q:
        q.enqueue_many([JobRequest("t", n) for n in range(1200)], chunk_size=500)
        q.enqueue("t", "one")
        key = q.core.keys.events
    redis_client.xadd(key, {"event": "note"})  # an entry of no job
    assert redis_client.xlen(key) == 5
    read = spark.read.format("conveyor_events").option("url", redis_url)
    assert read.option("queue", queue_name).load().count() == 1202
    assert _job_events(redis_client, key) == 1202

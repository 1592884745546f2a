"""Batch reads of jobs and events: schema, index-planned partitions, pushdown."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="PySpark is not installed: pip install -e '.[spark]'")

from conveyor import JobRequest, JobState, PermanentError, Queue, QueueSettings  # noqa: E402
from conveyor.client.tasks import Tasks  # noqa: E402

pytestmark = pytest.mark.spark

SETTINGS = QueueSettings(events_maxlen=100_000)


@pytest.fixture
def mixed_queue(redis_url: str, queue_name: str, worker_runner: Any) -> dict[str, Any]:
    """40 completed, 10 failed, 30 delayed, 20 waiting jobs."""
    from support.workers import wait_until

    tasks = Tasks(queue_name, settings=SETTINGS)

    @tasks.task(name="work")
    def work(data: dict[str, int]) -> dict[str, int]:
        if data["n"] % 5 == 0:
            raise PermanentError(f"bad input {data['n']}")
        return {"double": data["n"] * 2}

    with Queue(queue_name, url=redis_url, settings=SETTINGS) as q:
        q.enqueue_many([JobRequest("work", {"n": n}, {"id": f"done-{n}"}) for n in range(50)])
        handle = worker_runner.start(tasks, concurrency=8)
        wait_until(lambda: q.counts()[JobState.COMPLETED] == 40, timeout=30)
        wait_until(lambda: q.counts()[JobState.FAILED] == 10, timeout=30)
        handle.stop()
        middle = datetime.now(UTC)
        time.sleep(0.01)
        q.enqueue_many(
            [JobRequest("work", {"n": n}, {"id": f"later-{n}", "delay": 3600}) for n in range(30)]
            + [JobRequest("work", {"n": n}, {"id": f"new-{n}", "priority": 5}) for n in range(20)]
        )
    return {"queue": queue_name, "middle": middle}


def _jobs(spark: Any, url: str, queue: str, **options: str) -> Any:
    reader = spark.read.format("conveyor").option("url", url).option("queue", queue)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_read_every_job_with_the_documented_schema(
    spark: Any, redis_url: str, mixed_queue: dict[str, Any]
) -> None:
    from conveyor.integrations.spark import JOBS_DDL

    queue = mixed_queue["queue"]
    df = _jobs(spark, redis_url, queue, pageSize="7", numPartitions="3")
    assert df.schema.simpleString() == spark.createDataFrame([], JOBS_DDL).schema.simpleString()
    rows = {r["id"]: r for r in df.collect()}
    assert len(rows) == 100
    by_state: dict[str, int] = {}
    for row in rows.values():
        by_state[row["state"]] = by_state.get(row["state"], 0) + 1
    assert by_state == {"completed": 40, "failed": 10, "delayed": 30, "waiting": 20}
    done = rows["done-3"]
    assert (done["queue"], done["task"], done["data"], done["result"]) == (
        queue, "work", '{"n":3}', '{"double":6}'
    )  # fmt: skip
    assert done["attempts"] == 1 and done["worker"]
    assert done["created_at"] <= done["started_at"] <= done["finished_at"]
    failed = rows["done-5"]
    assert failed["state"] == "failed" and "bad input 5" in failed["error"]
    assert rows["new-1"]["priority"] == 5 and rows["new-1"]["started_at"] is None


def test_state_and_time_filters_are_pushed_down(
    spark: Any, redis_url: str, mixed_queue: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    from pyspark.sql import functions as F

    df = _jobs(spark, redis_url, mixed_queue["queue"])
    delayed = df.where(F.col("state") == "delayed")
    delayed.explain()
    plan = capsys.readouterr().out
    # the reader took the state filter over (it reads only the delayed index): no Filter left
    assert "BatchScan conveyor" in plan and "Filter" not in plan.split("BatchScan")[0]
    assert delayed.count() == 30
    finished = df.where(F.col("state").isin("completed", "failed"))
    assert finished.count() == 50
    assert df.where(F.col("finished_at") >= F.lit(mixed_queue["middle"])).count() == 0
    assert df.where(F.col("finished_at") < F.lit(mixed_queue["middle"])).count() == 50
    assert df.where(F.col("created_at") > F.lit(mixed_queue["middle"])).count() == 50
    only_failed = _jobs(spark, redis_url, mixed_queue["queue"], states="failed")
    assert only_failed.count() == 10


def test_user_schema_reads_fewer_columns(
    spark: Any, redis_url: str, mixed_queue: dict[str, Any]
) -> None:
    reader = spark.read.format("conveyor").schema("id string, state string, priority int")
    df = reader.option("url", redis_url).option("queue", mixed_queue["queue"]).load()
    rows = df.where("state = 'waiting'").collect()
    assert len(rows) == 20 and {r["priority"] for r in rows} == {5}
    with pytest.raises(Exception, match="no column"):
        spark.read.format("conveyor").schema("nope string").option("url", redis_url).option(
            "queue", mixed_queue["queue"]
        ).load().collect()


def test_read_events_batch(spark: Any, redis_url: str, mixed_queue: dict[str, Any]) -> None:
    from conveyor.integrations.spark import EVENTS_DDL

    events = (
        spark.read.format("conveyor_events")
        .option("url", redis_url)
        .option("queue", mixed_queue["queue"])
        .option("pageSize", "13")
        .option("numPartitions", "3")
        .load()
    )
    assert (
        events.schema.simpleString() == spark.createDataFrame([], EVENTS_DDL).schema.simpleString()
    )
    rows = events.collect()
    # one row per job event; the jobs of one entry (protocol §11) share its stream id
    assert len({(r["stream_id"], r["job_id"]) for r in rows}) == len(rows)
    with Queue(mixed_queue["queue"], url=redis_url) as q:
        entries = q.client.xlen(q.core.keys.events)
    assert entries < len(rows)  # the workers claimed and completed several jobs per call
    active_rows = [r for r in rows if r["event"] == "active"]
    assert sorted(r["job_id"] for r in active_rows) == sorted(f"done-{n}" for n in range(50))
    assert all(r["attempt"] == 1 and r["worker"] for r in active_rows)
    assert sorted(r["job_id"] for r in rows if r["event"] == "created") == sorted(
        [f"done-{n}" for n in range(50)]
        + [f"later-{n}" for n in range(30)]
        + [f"new-{n}" for n in range(20)]
    )
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["event"]] = counts.get(row["event"], 0) + 1
    assert counts == {"created": 100, "active": 50, "completed": 40, "failed": 10}
    active = next(r for r in rows if r["event"] == "active")
    assert active["attempt"] == 1 and active["worker"] and active["job_id"].startswith("done-")
    assert active["at"].year >= 2024
    failed = next(r for r in rows if r["event"] == "failed")
    assert "bad input" in failed["error"]


def test_read_events_a_row_per_entry(
    spark: Any, redis_url: str, mixed_queue: dict[str, Any]
) -> None:
    """rows=entries: a row per stream entry, `jobs` the job events it stands for."""
    from pyspark.sql import functions as F

    def read(**options: str) -> Any:
        reader = spark.read.format("conveyor_events").option("url", redis_url)
        return reader.option("queue", mixed_queue["queue"]).options(**options).load()

    with Queue(mixed_queue["queue"], url=redis_url) as q:
        entries = q.client.xlen(q.core.keys.events)
    per_entry = read(rows="entries", numPartitions="3", pageSize="7")
    assert per_entry.count() == entries
    weighed = per_entry.groupBy("event").agg(F.sum("jobs").alias("n")).collect()
    assert {r["event"]: r["n"] for r in weighed} == {
        "created": 100, "active": 50, "completed": 40, "failed": 10}  # fmt: skip
    assert read(rows="jobs").agg(F.sum("jobs")).first()[0] == read().count() == 200
    several = per_entry.where("jobs > 1").collect()
    assert several and all(r["job_id"] is None and r["attempt"] is None for r in several)
    with pytest.raises(Exception, match="rows='each'"):
        read(rows="each").collect()


def test_read_whole_data_stored_in_pieces(spark: Any, redis_url: str, queue_name: str) -> None:
    """Data over 64 bytes is stored in pieces (protocol §4.1): rows carry it whole, decoded."""
    import json

    long = "".join("x" * (k % 7) + "é€😀"[k % 3] for k in range(502))  # about 3 KB
    payloads = {"short": 1, "piece": "a" * 61 + "€" + "b" * 34, "long": long, "whole": "é" * 2500}
    with Queue(queue_name, url=redis_url) as q:
        q.enqueue_many([JobRequest("t", data, {"id": name}) for name, data in payloads.items()])
        q.enqueue("t", long, id="later", delay=3600)
    df = _jobs(spark, redis_url, queue_name, pageSize="3")
    rows = {r["id"]: r["data"] for r in df.select("id", "data").collect()}
    assert {name: json.loads(rows[name]) for name in payloads} == payloads
    assert json.loads(rows["later"]) == long


def test_flow_parents_are_read_in_waiting_children(
    spark: Any, redis_url: str, queue_name: str
) -> None:
    from conveyor.client.flows import FlowJob

    with Queue(queue_name, url=redis_url) as q:
        children = [FlowJob(task="part", data=n, options={"id": f"c{n}"}) for n in range(3)]
        q.enqueue_flow(FlowJob(task="sum", options={"id": "parent"}, children=children))
    jobs = spark.read.format("conveyor").option("url", redis_url).option("queue", queue_name)
    rows = {r["id"]: r["state"] for r in jobs.load().select("id", "state").collect()}
    assert rows == {"parent": "waiting_children", "c0": "waiting", "c1": "waiting",
                    "c2": "waiting"}  # fmt: skip
    only = jobs.load().where("state = 'waiting_children'").select("id").collect()
    assert [r["id"] for r in only] == ["parent"]


def test_a_batch_read_of_events_takes_a_slice_per_rows_per_partition(
    spark: Any, redis_url: str, queue_name: str
) -> None:
    """Events bunch up in time (a bulk enqueue): the default is a slice per
    `rowsPerPartition` entries, at least 2, so two cores share the read."""
    import redis

    from conveyor.integrations.spark.events import EventsConfig, EventsReader
    from conveyor.integrations.spark.options import Options
    from conveyor.protocol.keys import QueueKeys

    key = QueueKeys("conveyor", queue_name).events
    client = redis.Redis.from_url(redis_url)
    for n in range(100):  # one a second: every slice by time holds some
        client.xadd(key, {"event": "created", "id": f"j{n}"}, id=f"{1_000_000 + n * 1000}-0")
    client.close()

    def planned(**options: str) -> int:
        given = {"url": redis_url, "queue": queue_name, **options}
        schema = spark.createDataFrame([], "event string").schema
        reader = EventsReader(EventsConfig.parse(Options(given, source="conveyor_events")), schema)
        return len(reader.partitions())

    assert planned() == 2
    assert planned(rowsPerPartition="10") == 10
    assert planned(rowsPerPartition="10", numPartitions="3") == 3
    events = (
        spark.read.format("conveyor_events")
        .option("url", redis_url)
        .option("queue", queue_name)
        .option("rowsPerPartition", "7")
        .load()
    )
    ids = [r["job_id"] for r in events.select("job_id").collect()]
    assert sorted(ids) == sorted(f"j{n}" for n in range(100))

"""Batch writes: rows become jobs through the enqueue script; retries add no duplicates."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark", reason="PySpark is not installed: pip install -e '.[spark]'")

from conveyor import JobState, Queue  # noqa: E402
from conveyor.client.events import decode_entries  # noqa: E402

pytestmark = pytest.mark.spark


def _orders(spark: Any, n: int, partitions: int = 2) -> Any:
    return spark.range(n, numPartitions=partitions).selectExpr(
        "concat('order-', id) AS id",
        "id AS customer",
        "cast(id * 1.5 AS double) AS amount",
        "cast(id % 3 AS int) * 1000 AS priority",
    )


def _write(df: Any, url: str, queue: str, **options: str) -> None:
    writer = df.write.format("conveyor").option("url", url).option("queue", queue)
    writer = writer.option("task", "orders.process")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.mode("append").save()


def test_rows_become_jobs_with_payload_columns(spark: Any, redis_url: str, queue_name: str) -> None:
    _write(_orders(spark, 2000), redis_url, queue_name)
    with Queue(queue_name, url=redis_url) as q:
        assert q.counts()[JobState.WAITING] == 2000
        job = q.get("order-7")
        assert job is not None
        assert job.task == "orders.process"
        assert job.data == {"customer": 7, "amount": 10.5}
        assert job.priority == 1000


def test_data_column_task_column_and_options(spark: Any, redis_url: str, queue_name: str) -> None:
    rows = [
        ("a", "mail.send", '{"to": "a@example.com"}', None, None, "acme"),
        ("b", "mail.send", '{"to": "b@example.com"}', 3600.0, 0, None),
        ("c", "sms.send", "[1, 2]", None, 2000, None),
    ]
    df = spark.createDataFrame(rows, "id string, task string, data string, delay double, "
                               "priority int, `group` string")  # fmt: skip
    df.write.format("conveyor").option("url", redis_url).option("queue", queue_name).mode(
        "append"
    ).save()
    with Queue(queue_name, url=redis_url) as q:
        a, b, c = q.get("a"), q.get("b"), q.get("c")
        assert a and b and c
        assert (a.task, a.data, a.group, a.state) == (
            "mail.send", {"to": "a@example.com"}, "acme", JobState.WAITING
        )  # fmt: skip
        assert b.state == JobState.DELAYED and b.priority == 0
        assert (c.task, c.data, c.priority) == ("sms.send", [1, 2], 2000)


def test_bad_writes_fail_on_the_driver(spark: Any, redis_url: str, queue_name: str) -> None:
    df = spark.createDataFrame([("x", 1)], "id string, n int")
    base = df.write.format("conveyor").option("url", redis_url).option("queue", queue_name)
    with pytest.raises(Exception, match="every job needs a task"):
        base.mode("append").save()
    with pytest.raises(Exception, match="only appends"):
        base.option("task", "t").mode("overwrite").save()
    with pytest.raises(Exception, match="unknown option"):
        base.option("task", "t").option("chunksize", "5").option("bogus", "1").mode("append").save()
    bad_json = spark.createDataFrame([("x", "{nope")], "id string, data string")
    with pytest.raises(Exception, match="not JSON"):
        _write(bad_json, redis_url, queue_name)
    with Queue(queue_name, url=redis_url) as q:
        assert sum(q.counts().values()) == 0


@pytest.mark.parametrize("if_exists", ["skip", "update"])
def test_failed_task_then_rerun_makes_no_duplicates(
    spark: Any, redis_url: str, queue_name: str, worker_runner: Any, if_exists: str
) -> None:
    """A write that dies mid-way left some jobs; workers already run some of them; the
    re-run (same writeId, as a retried task would) tops up to exactly one job per row and
    touches none of the running ones (no blocked twin, nothing runs twice). With
    ifExists=update no look-up runs: the write's enqueue request id alone does it."""
    import threading

    from conveyor import QueueSettings
    from conveyor.client.tasks import Tasks
    from support.workers import wait_until

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        df = _orders(spark, 1000).drop("id")  # generated ids: <writeId>-<partition>-<row>
        with pytest.raises(Exception, match="testFailAfterRows"):
            _write(
                df, redis_url, queue_name, writeId="w1", testFailAfterRows="300", ifExists=if_exists
            )
        with Queue(queue_name, url=redis_url) as q:
            partial = q.counts()[JobState.WAITING]
            assert 300 <= partial < 1000

            release = threading.Event()
            runs: dict[str, int] = {}
            tasks = Tasks(queue_name, settings=QueueSettings(events_maxlen=100_000))

            @tasks.task(name="orders.process")
            def process(data: Any) -> None:
                from conveyor.worker import current_job

                job_id = current_job().id
                runs[job_id] = runs.get(job_id, 0) + 1
                release.wait(30)

            worker_runner.start(tasks, concurrency=10)
            wait_until(lambda: q.counts()[JobState.ACTIVE] == 10)
            _write(
                df, redis_url, queue_name, writeId="w1", eventsMaxlen="100000", ifExists=if_exists
            )
            counts = q.counts()
            assert counts[JobState.ACTIVE] == 10 and counts[JobState.BLOCKED] == 0
            assert counts[JobState.WAITING] == 990
            release.set()
            wait_until(lambda: q.counts()[JobState.COMPLETED] == 1000, timeout=60)
            assert len(runs) == 1000 and set(runs.values()) == {1}
            names = [e.name for e in q.events(after="0-0", count=100_000)]
            assert names.count("created") == 1000 and "blocked" not in names
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")


def test_atomic_write_is_all_or_nothing(
    spark: Any, redis_url: str, queue_name: str, redis_client: Any
) -> None:
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        df = _orders(spark, 1000)
        with pytest.raises(Exception, match="testFailAfterRows"):
            _write(df, redis_url, queue_name, atomic="true", testFailAfterRows="300")
        with Queue(queue_name, url=redis_url) as q:
            assert sum(q.counts().values()) == 0
            assert redis_client.xlen(q.core.keys.events) == 0
            # nothing staged is left, even by a task still running when Spark aborted: only
            # the abort's tombstone, which stops such a task from staging more
            staged = {k.decode() for k in redis_client.scan_iter(match=f"*{queue_name}*staging*")}
            assert all(key.endswith(":aborted") for key in staged) and len(staged) == 1
            _write(df, redis_url, queue_name, atomic="true", writeId="a1")
            assert q.counts()[JobState.WAITING] == 1000
            staged = {k.decode() for k in redis_client.scan_iter(match=f"*{queue_name}*staging*")}
            assert all(key.endswith(":aborted") for key in staged)
            # the same write again (a re-run) adds nothing
            _write(df, redis_url, queue_name, atomic="true", writeId="a1")
            assert q.counts()[JobState.WAITING] == 1000
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")


@pytest.mark.parametrize("skip", [False, True], ids=["enqueue", "enqueue_skip"])
def test_scripts_flushed_mid_write_are_loaded_again(
    redis_url: str, queue_name: str, redis_client: Any, monkeypatch: pytest.MonkeyPatch, skip: bool
) -> None:
    """A NOSCRIPT (scripts flushed or the server restarted mid-write) loads the script again
    and re-sends every call not yet acknowledged; nothing is lost or doubled."""
    import pyarrow as pa

    from conveyor.integrations.spark.encode import RowEncoder
    from conveyor.integrations.spark.send import EnqueueSender

    with Queue(queue_name, url=redis_url) as q:
        encoder = RowEncoder(
            q.core,
            default_task="t",
            id_prefix="w-0",
            request="spark-w",
            validate_data=True,
            skip=skip,
        )
        chunk = encoder.encode(pa.RecordBatch.from_pydict({"n": list(range(1000))}), 0)
        assert chunk.script == ("enqueue_skip" if skip else "enqueue")
        sender = EnqueueSender(q.client, q.core, depth=2, skip_existing=False)
        resent: list[int] = []
        send_again = sender._send_again
        monkeypatch.setattr(
            sender, "_send_again", lambda chunks: (resent.append(len(chunks)), send_again(chunks))
        )
        try:
            first, second, third = chunk.split(400)
            sender.add(first)
            sender.add(second)  # a group of two: sent, its replies not read yet
            redis_client.script_flush()
            sender.add(third)
            assert sender.flush() == {"created": 1000}
            assert resent  # the NOSCRIPT path did run
        finally:
            sender.close()
        assert q.counts()[JobState.WAITING] == 1000


def _calls(redis_client: Any, command: str) -> int:
    return int(redis_client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def _run_one(redis_client: Any, q: Queue) -> str:
    """Claim the first job in line and complete it, as a worker would; its id."""
    from conveyor.client.transport import SyncRunner
    from conveyor.protocol import ops

    runner = SyncRunner(redis_client, q.core.scripts)
    claim = ops.claim(q.core.keys, worker_id="w", count=1, lease_ms=60_000, token="t",
                      promote=1, events_maxlen=100_000)  # fmt: skip
    (job,) = ops.decode_claim(runner.run(claim)).jobs
    done = ops.complete(q.core.keys, [(job.id, "t", "1")], events_maxlen=100_000)
    assert ops.decode_complete(runner.run(done)) == [True]
    return job.id


def _job_events(redis_client: Any, q: Queue) -> list[tuple[str, str]]:
    """(event, job id) of every job event, oldest first (an entry may name several, §11)."""
    return [(e.name, e.job_id) for e in decode_entries(redis_client.xrange(q.core.keys.events))]


def test_a_rewrite_skips_existing_ids_in_the_script_without_a_look_up(
    spark: Any, redis_url: str, queue_name: str, redis_client: Any
) -> None:
    """ifExists=skip: rows whose options enqueue_skip takes go to that script, which leaves
    every existing id alone by itself: no ZMSCORE look-up round trip, no duplicate, and a
    finished job is neither re-run nor touched by a re-run of the write with another
    writeId (as a retried Spark task or a re-run of the whole job would send it)."""
    looked_up = _calls(redis_client, "zmscore")
    _write(_orders(spark, 1000), redis_url, queue_name, writeId="first")
    assert _calls(redis_client, "zmscore") == looked_up
    with Queue(queue_name, url=redis_url) as q:
        assert q.counts()[JobState.WAITING] == 1000
        first = q.get("order-4")
        assert first is not None and first.priority == 1000 and first.data["customer"] == 4
        assert "req" not in {k.decode() for k in redis_client.hkeys(q.core.keys.job("order-4"))}
        finished = _run_one(redis_client, q)
        before = _job_events(redis_client, q)
        _write(_orders(spark, 1200), redis_url, queue_name, writeId="second")
        after = _job_events(redis_client, q)
        assert after[: len(before)] == before
        new_rows = [("created", f"order-{n}") for n in range(1000, 1200)]
        assert sorted(after[len(before) :]) == sorted(new_rows)  # the 200 new rows only
        counts = q.counts()
        assert counts[JobState.WAITING] == 1199 and counts[JobState.BLOCKED] == 0
        assert counts[JobState.COMPLETED] == 1
        assert q.get(finished).attempts == 1  # type: ignore[union-attr]
        assert q.get("order-1100") is not None
    assert _calls(redis_client, "zmscore") == looked_up


def test_rows_with_options_enqueue_skip_lacks_go_to_enqueue_and_still_skip(
    spark: Any, redis_url: str, queue_name: str, redis_client: Any
) -> None:
    df = spark.range(300, numPartitions=1).selectExpr(
        "concat('d-', id) AS id", "id AS n", "IF(id % 2 = 0, NULL, 60.0) AS delay"
    )
    _write(df, redis_url, queue_name, writeId="w1")
    looked_up = _calls(redis_client, "zmscore")
    _write(df, redis_url, queue_name, writeId="w2")  # a rerun: every id exists
    assert _calls(redis_client, "zmscore") > looked_up  # enqueue's path looks ids up first
    with Queue(queue_name, url=redis_url) as q:
        counts = q.counts()
        assert (counts[JobState.WAITING], counts[JobState.DELAYED]) == (150, 150)
        assert len(_job_events(redis_client, q)) == 300

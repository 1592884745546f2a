"""conveyor.spark.apply: rows through the queue and back, joined to their outcome."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="PySpark is not installed: pip install -e '.[spark]'")

from conveyor import JobState, Queue, QueueSettings  # noqa: E402
from conveyor.client.tasks import Tasks  # noqa: E402
from conveyor.errors import PermanentError, ValidationError, WaitTimeoutError  # noqa: E402

pytestmark = pytest.mark.spark


def _rows(spark: Any, n: int) -> Any:
    return spark.range(n, numPartitions=2).selectExpr(
        "id AS n", "concat('tenant-', id % 3) AS `group`", "cast(id % 2 AS int) AS priority"
    )


def _squares(queue: str, runs: dict[int, int], lock: threading.Lock) -> Tasks:
    tasks = Tasks(queue, settings=QueueSettings(events_maxlen=100))

    @tasks.task(name="square", max_failures=2, min_backoff=0, max_backoff=0)
    def square(data: dict[str, Any]) -> int:
        from conveyor.worker import current_job

        n = data["n"]
        with lock:
            runs[n] = runs.get(n, 0) + 1
        if n == 7 and current_job().attempt == 1:
            raise RuntimeError("flaky once")  # retried by its policy
        if n == 13:
            raise PermanentError("thirteen")
        return int(n * n)

    return tasks


def test_rows_come_back_with_their_outcome_and_a_rerun_runs_nothing_again(
    spark: Any, redis_url: str, queue_name: str, worker_runner: Any
) -> None:
    from conveyor.spark import apply

    runs: dict[int, int] = {}
    lock = threading.Lock()
    worker_runner.start(_squares(queue_name, runs, lock), concurrency=8)
    # a small events cap: the stream is trimmed while apply waits, but never past what
    # apply has not read (it registers itself as a reader)
    df = _rows(spark, 300)
    out = apply(df, queue=queue_name, task="square", url=redis_url, timeout=120,
                write_options={"eventsMaxlen": "100"})  # fmt: skip
    rows = {r["n"]: r for r in out.collect()}
    assert set(rows) == set(range(300))
    assert out.columns == [*df.columns, "job_id", "state", "result", "error", "attempts",
                           "run_time", "worker"]  # fmt: skip
    assert rows[4]["state"] == "completed" and rows[4]["result"] == "16"
    assert rows[4]["group"] == "tenant-1" and rows[4]["attempts"] == 1
    assert rows[4]["worker"] and rows[4]["run_time"] >= 0
    assert rows[7]["state"] == "completed" and rows[7]["attempts"] == 2
    assert rows[13]["state"] == "failed" and "thirteen" in rows[13]["error"]
    assert rows[13]["result"] is None
    with Queue(queue_name, url=redis_url) as q:
        assert q.get(rows[5]["job_id"]).priority == 1  # option columns set job options
        assert not q.client.hgetall(q.core.keys.consumers)  # apply's reader unregistered
    assert sum(runs.values()) == 301 and runs[7] == 2

    # the same rows again (a re-run of the whole Spark job): outcomes reused, nothing runs
    again = {r["n"]: r for r in apply(df, queue=queue_name, task="square", url=redis_url,
                                      timeout=60).collect()}  # fmt: skip
    assert again[4]["result"] == "16" and again[13]["state"] == "failed"
    assert sum(runs.values()) == 301

    # twice the rows, in one partition read 100 rows to an Arrow batch: the first batches
    # hold only finished rows (no pending id), the later ones new rows; only those run
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    spark.conf.set(key, "100")
    try:
        doubled = _rows(spark, 600).coalesce(1)
        more = {r["n"]: r for r in apply(doubled, queue=queue_name, task="square",
                                         url=redis_url, timeout=120).collect()}  # fmt: skip
    finally:
        spark.conf.unset(key)
    assert set(more) == set(range(600)) and more[599]["result"] == str(599 * 599)
    assert sum(runs.values()) == 301 + 300


def test_equal_rows_share_one_job_run_once(
    spark: Any, redis_url: str, queue_name: str, worker_runner: Any
) -> None:
    """Copies of a row (one id: the hash of the task and data) in both partitions and in one
    write call make one job, run once; every copy comes back with its outcome."""
    from conveyor.spark import apply

    runs: dict[int, int] = {}
    lock = threading.Lock()
    worker_runner.start(_squares(queue_name, runs, lock), concurrency=8)
    df = spark.range(600, numPartitions=2).selectExpr("id % 50 AS n")  # 12 copies each
    out = apply(df, queue=queue_name, task="square", url=redis_url, timeout=120).collect()
    assert len(out) == 600 and len({r["job_id"] for r in out}) == 50
    assert {r["n"]: r["result"] for r in out if r["n"] == 6} == {6: "36"}
    assert runs == {n: 2 if n == 7 else 1 for n in range(50)}  # 7 fails once, retried
    # 50 jobs in all (the events stream cannot tell: the workers' cap of 100 trims the
    # `created` events once apply has read past them)
    with Queue(queue_name, url=redis_url) as q:
        counts = q.counts()
        assert counts[JobState.COMPLETED] + counts[JobState.FAILED] == 50
        assert sum(counts.values()) == 50


def test_a_data_column_and_an_id_column_are_used_as_given(
    spark: Any, redis_url: str, queue_name: str, worker_runner: Any
) -> None:
    from conveyor.spark import apply

    tasks = Tasks(queue_name)

    @tasks.task(name="echo")
    async def echo(data: Any) -> Any:
        return data

    worker_runner.start(tasks)
    df = spark.createDataFrame([("a", '{"x": 1}'), ("b", "[2]")], "key string, data string")
    rows = {r["key"]: r for r in apply(df, queue=queue_name, task="echo", url=redis_url,
                                       id_column="key", timeout=60).collect()}  # fmt: skip
    assert rows["a"]["job_id"] == "a" and rows["a"]["result"] == '{"x":1}'
    assert rows["b"]["result"] == "[2]"


def test_waiting_ends_with_a_timeout_and_bad_arguments_are_refused(
    spark: Any, redis_url: str, queue_name: str
) -> None:
    from conveyor.spark import apply

    df = _rows(spark, 5)
    with pytest.raises(WaitTimeoutError, match="5 job"):  # no worker runs
        apply(df, queue=queue_name, task="square", url=redis_url, timeout=0.5)
    with Queue(queue_name, url=redis_url) as q:
        assert q.counts()[JobState.WAITING] == 5
        assert not q.client.hgetall(q.core.keys.consumers)  # the reader unregistered
    for bad in ({"timeout": 0}, {"run_id": "a b"}, {"id_column": "nope"}, {"queue": "a:b"}):
        args: dict[str, Any] = {"queue": queue_name, "task": "square", "url": redis_url} | bad
        with pytest.raises(ValidationError):
            apply(df, **args)


@pytest.mark.slow  # about 40-100 s: worker processes and several Spark jobs (make demo runs it)
def test_the_apply_demo_holds_the_rate_limit_and_reports(
    spark: Any, redis_url: str, queue_name: str
) -> None:
    from conveyor.integrations.spark.apply_demo import run_apply_demo

    lines: list[str] = []
    result = run_apply_demo(spark, redis_url, 3000, queue=queue_name, rate=1500, workers=1,
                            concurrency=50, say=lines.append)  # fmt: skip
    assert result.rows == 3000 and result.by_state == {"completed": 3000}
    assert 0 < result.retried_rows < 100  # 1 % of first calls time out, retried
    # 3000 calls at 1500/s take at least a second in every window (fixed or sliding)
    assert result.seconds >= 1.0
    assert any("rows back in" in line for line in lines)


def test_a_failed_write_then_a_rerun_waits_for_every_job_it_left(
    spark: Any, redis_url: str, queue_name: str, worker_runner: Any, redis_client: Any
) -> None:
    """The write's tasks tell apply which jobs will still end (from the enqueue_skip
    replies): after a write that failed half-way, a re-run finds the jobs it left finished,
    running or waiting, waits for the unfinished ones only, and nothing runs twice."""
    from conveyor.spark import apply

    runs: dict[int, int] = {}
    lock = threading.Lock()
    release = threading.Event()
    tasks = Tasks(queue_name, settings=QueueSettings(events_maxlen=100_000))

    @tasks.task(name="slow_odd")
    def slow_odd(data: dict[str, Any]) -> int:
        n = data["n"]
        with lock:
            runs[n] = runs.get(n, 0) + 1
        if n % 2:
            release.wait(10)
        return int(n) + 1

    df = spark.range(300, numPartitions=2).selectExpr("id AS n")  # no option column: skip
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    spark.conf.set(key, "50")
    try:
        with pytest.raises(Exception, match="testFailAfterRows"):
            apply(df, queue=queue_name, task="slow_odd", url=redis_url, timeout=60,
                  write_options={"testFailAfterRows": "50"})  # fmt: skip
    finally:
        spark.conf.unset(key)
    with Queue(queue_name, url=redis_url) as q:
        left = q.counts()[JobState.WAITING]
    assert 100 <= left < 300
    worker_runner.start(tasks, concurrency=64)
    threading.Timer(3.0, release.set).start()
    time.sleep(1.0)  # some jobs it left finish, the odd ones run (held) or wait
    out = {r["n"]: r for r in apply(df, queue=queue_name, task="slow_odd", url=redis_url,
                                    timeout=60).collect()}  # fmt: skip
    assert set(out) == set(range(300))
    assert all(r["state"] == "completed" and r["result"] == str(n + 1) for n, r in out.items())
    assert runs == {n: 1 for n in range(300)}
    assert not list(redis_client.scan_iter(match=f"*{queue_name}*:spark:*"))  # no key left

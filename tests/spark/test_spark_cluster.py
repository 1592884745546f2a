"""The Spark formats and `apply` on a 3-master loopback Redis Cluster (`redis+cluster://`),
with the queues spread over the masters."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark", reason="PySpark is not installed: pip install -e '.[spark]'")

from conveyor import JobState, Queue  # noqa: E402
from conveyor.client.tasks import Tasks  # noqa: E402
from support.cluster import cluster_url, owner_port, start_cluster  # noqa: E402
from support.servers import ServerFactory  # noqa: E402
from support.workers import WorkerRunner, wait_until  # noqa: E402

pytestmark = pytest.mark.spark


def _spread(nodes: list[Any], count: int, tag: str) -> list[str]:
    names: dict[int, str] = {}
    for i in range(1000):
        name = f"{tag}{i}"
        names.setdefault(owner_port(nodes, f"conveyor:{{{name}}}:"), name)
        if len(names) == count:
            return list(names.values())
    raise AssertionError("no queue names spread over the masters")


def test_write_read_and_apply_on_a_cluster(
    spark: Any, server_factory: ServerFactory, queue_name: str
) -> None:
    from conveyor.spark import apply

    nodes = start_cluster(server_factory, masters=3)
    url = cluster_url(nodes)
    queues = _spread(nodes, 3, queue_name)
    df = spark.range(200, numPartitions=2).selectExpr("id AS n")
    for queue in queues:  # one write per queue, each to the master of its slot
        (df.write.format("conveyor").option("url", url).option("queue", queue)
           .option("task", "double").mode("append").save())  # fmt: skip
    for queue in queues:
        with Queue(queue, url=url) as q:
            assert q.counts()[JobState.WAITING] == 200
        jobs = spark.read.format("conveyor").option("url", url).option("queue", queue).load()
        assert jobs.where("state = 'waiting'").count() == 200

    tasks = Tasks(queues[0], url=url)

    @tasks.task(name="double")
    async def double(data: dict[str, int]) -> int:
        return data["n"] * 2

    workers = WorkerRunner(url)
    try:
        workers.start(tasks, concurrency=20)
        with Queue(queues[0], url=url) as q:
            wait_until(lambda: q.counts()[JobState.COMPLETED] == 200, timeout=60)
        out = apply(spark.range(50).selectExpr("id AS n"), queue=queues[0], task="double",
                    url=url, timeout=120)  # fmt: skip
    finally:
        workers.stop_all()
    rows = {r["n"]: r for r in out.collect()}
    assert len(rows) == 50 and rows[21]["result"] == "42" and rows[21]["state"] == "completed"

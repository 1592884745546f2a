"""The driver of tests/spark/test_spark_standalone.py, run as its own process
(one SparkContext per process; the suite's own is `local[2]`): against the
standalone master in argv, write jobs, read them back and `apply` a task,
then print what it saw as JSON. `double` is the task its worker runs."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from conveyor.client.tasks import Tasks

tasks = Tasks(os.environ.get("TEST_QUEUE", "default"))


@tasks.task
async def double(data: dict[str, int]) -> int:
    return data["n"] * 2


def main(master: str, url: str, written: str, applied: str) -> dict[str, Any]:
    from pyspark.sql import SparkSession

    from conveyor.integrations.spark import register
    from conveyor.spark import apply

    spark = (
        SparkSession.builder.master(master)
        .appName("conveyor-standalone-test")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executor.memory", "512m")
        .config("spark.cores.max", "2")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    register(spark)
    try:
        df = spark.range(200, numPartitions=2).selectExpr("id AS n")
        (df.write.format("conveyor").option("url", url).option("queue", written)
           .option("task", "double").mode("append").save())  # fmt: skip
        jobs = spark.read.format("conveyor").option("url", url).option("queue", written).load()
        waiting = jobs.where("state = 'waiting'").count()
        out = apply(spark.range(50).selectExpr("id AS n"), queue=applied, task="double",
                    url=url, timeout=120)  # fmt: skip
        rows = {r["n"]: r.asDict() for r in out.collect()}
        executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()  # noqa: SLF001
        return {
            "master": spark.sparkContext.master,
            "executors": executors,
            "waiting": waiting,
            "applied": len(rows),
            "result_21": rows[21]["result"],
            "state_21": rows[21]["state"],
        }
    finally:
        spark.stop()


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:5])))

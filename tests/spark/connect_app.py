"""Run by test_spark_connect.py in a process of its own: a Spark Connect session (`sc://`,
here a local Spark Connect server that PySpark starts from its own jars) writes, reads and
applies through the Conveyor formats, and prints what it saw as JSON."""

from __future__ import annotations

import json
import os
import sys

from pyspark.sql import SparkSession

from conveyor.integrations.spark import register
from conveyor.spark import apply

url, queue = os.environ["TEST_REDIS_URL"], os.environ["TEST_QUEUE"]
os.environ["PYSPARK_PYTHON"] = sys.executable
spark = SparkSession.builder.remote("local[2]").getOrCreate()
seen: dict[str, object] = {"session": type(spark).__module__}
register(spark)
df = spark.range(20, numPartitions=2).selectExpr("id AS n")
(df.write.format("conveyor").option("url", url).option("queue", queue).option("task", "square")
   .mode("append").save())  # fmt: skip
jobs = spark.read.format("conveyor").option("url", url).option("queue", queue).load()
seen["read"] = jobs.count()
out = apply(df, queue=queue, task="square", url=url, timeout=120)
seen["results"] = sorted(int(r["result"]) for r in out.collect())
spark.stop()
print("RESULT " + json.dumps(seen))

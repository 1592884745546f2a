"""Conveyor on Apache Spark: data sources, archive, report and the demo pipeline.

Needs the `spark` extra (PySpark 4.x, pyarrow) and Java 17+. Nothing here imports pyspark
until it is used, and the core never imports this package.

    from conveyor.integrations.spark import register
    register(spark)                       # formats "conveyor" and "conveyor_events"
    df.write.format("conveyor").option("url", url).option("queue", "q").mode("append").save()
    jobs = spark.read.format("conveyor").option("url", url).option("queue", "q").load()

The archive and the report: `conveyor.integrations.spark.archive.archive` and
`conveyor.integrations.spark.report.report` (and their `main(argv)` commands). See
docs/spark.md for the schemas, the options and the guarantees.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .schema import (
    EVENTS_DDL,
    EVENTS_SCHEMA_VERSION,
    JOBS_DDL,
    JOBS_SCHEMA_VERSION,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "EVENTS_DDL",
    "EVENTS_SCHEMA_VERSION",
    "JOBS_DDL",
    "JOBS_SCHEMA_VERSION",
    "apply",
    "build_session",
    "check_java",
    "register",
    "run_pipeline",
    "trim_events",
]

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
REGISTERED_CONF = "spark.conveyor.sourcesRegistered"


def register(spark: SparkSession, *, filter_pushdown: bool = True) -> None:
    """Register `conveyor`, `conveyor_events` (and the archive's internal
    `conveyor_forget`) with this session.

    With `filter_pushdown` (the default) it also turns on Spark's Python filter pushdown for
    the session, which the `conveyor` reader uses for `state` and time-range filters; pass
    False to leave the session's setting alone (then read with `filterPushdown=false`).
    """
    from .forget import ForgetDataSource
    from .sources import EventsDataSource, JobsDataSource

    if filter_pushdown:
        spark.conf.set(PUSHDOWN_CONF, "true")
    # Once per session: registering again makes Spark warn "replaced a previously
    # registered data source" for each format.
    if spark.conf.get(REGISTERED_CONF, None) == "true":
        return
    spark.dataSource.register(JobsDataSource)
    spark.dataSource.register(EventsDataSource)
    spark.dataSource.register(ForgetDataSource)
    spark.conf.set(REGISTERED_CONF, "true")


def trim_events(
    url: str, queue: str, *, prefix: str = "conveyor", keep_seconds: float | None = None
) -> int:
    """Trim `queue`'s events stream up to the slowest registered consumer (streaming reads
    with `consumerName`), keeping at least the last `keep_seconds`; returns entries removed.
    With no consumer registered and no `keep_seconds`, nothing is removed."""
    from conveyor.client.models import QueueSettings

    from . import store
    from .options import Target

    target = Target(url, queue, prefix, QueueSettings().events_maxlen)
    client = target.client()
    try:
        keep = None if keep_seconds is None else round(keep_seconds * 1000)
        return store.trim_events(client, target.keys(), keep_ms=keep)
    finally:
        client.close()


def __getattr__(name: str) -> Any:
    """Lazy access to the heavier entry points (they import pyspark)."""
    if name == "apply":
        from .roundtrip import apply

        return apply
    if name == "run_pipeline":
        from .pipeline import run_pipeline

        return run_pipeline
    if name in ("build_session", "check_java"):
        from . import session

        return getattr(session, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

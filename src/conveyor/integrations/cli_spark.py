"""`conveyor archive` and `conveyor report`: the Spark jobs, with the same
options and the same embedded default as every other command. PySpark is
imported only when one runs (the `spark` extra)."""

from __future__ import annotations

import json
from contextlib import ExitStack
from dataclasses import asdict

import click

from conveyor.integrations.cli_options import prefix_option, resolved_url, url_option

master_option = click.option("--master", help="Spark master, e.g. local[4] or spark://host:7077.")


@click.command()
@click.option("-q", "--queue", "queues", multiple=True, required=True, help="Repeatable.")
@click.option("--path", required=True, help="Dataset root: a local dir, hdfs://, s3a://.")
@click.option("--finished-before", help="Keep jobs finished later (ISO-8601 or epoch seconds).")
@master_option
@url_option
@prefix_option
def archive(
    queues: tuple[str, ...], path: str, finished_before: str | None, master: str | None,
    url: str | None, prefix: str,
) -> None:  # fmt: skip
    """Copy finished jobs to Parquet (by queue and day), then remove them from
    Redis. Safe to re-run after any failure."""
    from conveyor.integrations.spark.archive import archive as run_archive
    from conveyor.integrations.spark.session import build_session

    with resolved_url(url) as found:
        spark = build_session(master, app_name="conveyor-archive")
        try:
            results = run_archive(
                spark, found, path, queues, prefix=prefix, finished_before=finished_before
            )
        finally:
            spark.stop()
    for result in results:
        click.echo(json.dumps(asdict(result)))


@click.command()
@click.option("-q", "--queue", "queues", multiple=True, help="A live queue (repeatable).")
@click.option("--archive", "archive_path", help="Archive dataset root (as given to archive).")
@click.option("--out", default="conveyor-report", show_default=True, help="Output directory.")
@master_option
@url_option
@prefix_option
def report(
    queues: tuple[str, ...], archive_path: str | None, out: str, master: str | None,
    url: str | None, prefix: str,
) -> None:  # fmt: skip
    """Throughput, wait/run percentiles, retry/failure/stall rates and top
    errors, over archived Parquet and live queues: report.html and summary.json."""
    if not archive_path and not queues:
        raise click.UsageError("give --archive, or at least one --queue (or both)")
    from conveyor.integrations.spark.report import report as run_report
    from conveyor.integrations.spark.session import build_session

    with ExitStack() as stack:
        live = stack.enter_context(resolved_url(url)) if queues else None
        spark = build_session(master, app_name="conveyor-report")
        try:
            paths = run_report(
                spark, out, archive_path=archive_path, url=live, queues=queues, prefix=prefix
            )
        finally:
            spark.stop()
    click.echo(f"report: {paths.html}\nsummary: {paths.json}")

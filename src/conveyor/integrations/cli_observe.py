"""Observability commands of `conveyor`: a job's own log."""

from __future__ import annotations

import json
from contextlib import ExitStack

import click

from conveyor.client.sync import Queue
from conveyor.integrations.cli_options import redis_url, url_option


@click.command("log")
@click.argument("queue")
@click.argument("job_id")
@url_option
@click.option("--json", "as_json", is_flag=True, help="A JSON array of the lines.")
def log_command(queue: str, job_id: str, url: str | None, as_json: bool) -> None:
    """The lines job JOB_ID of QUEUE wrote to its own log (current_job().log)."""
    with ExitStack() as stack, Queue(queue, url=redis_url(url, stack)) as q:
        lines = q.job_log(job_id)
        if not lines and q.get(job_id) is None:
            raise click.ClickException(f"no job {job_id!r} in queue {queue!r}")
    if as_json:
        click.echo(json.dumps(lines))
    else:
        for line in lines:
            click.echo(line)

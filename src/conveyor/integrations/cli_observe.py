"""Observability commands of `conveyor`: a job's own log."""

from __future__ import annotations

import json

import click

from conveyor.integrations.cli_options import open_kept, prefix_option, url_option


@click.command("log")
@click.argument("queue")
@click.argument("job_id")
@url_option
@prefix_option
@click.option("--json", "as_json", is_flag=True, help="A JSON array of the lines.")
def log_command(queue: str, job_id: str, url: str | None, prefix: str, as_json: bool) -> None:
    """The lines job JOB_ID of QUEUE wrote to its own log (current_job().log)."""
    with open_kept(queue, url, prefix) as q:
        lines = q.job_log(job_id)
        if not lines and q.get(job_id) is None:
            raise click.ClickException(f"no job {job_id!r} in queue {queue!r}")
    if as_json:
        click.echo(json.dumps(lines))
    else:
        for line in lines:
            click.echo(line)

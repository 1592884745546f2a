"""The driver of pipelines (client/pipelines.py): a step job that adds each
step's jobs as its children, waits for them, and hands their results on."""

from __future__ import annotations

from typing import Any

from conveyor.client.pipelines import next_jobs
from conveyor.worker.context import current_job


async def drive_pipeline(spec: dict[str, Any]) -> Any:
    """One run of a driver: add the next step's jobs and wait, or return the
    final value once every step has settled."""
    job = current_job()
    children = await job.children_async()
    settled: dict[str, Any] = dict(children.results)
    settled.update(dict.fromkeys(children.ignored))
    settled.update(dict.fromkeys(children.failed))  # only `continue` reaches here
    jobs, value = next_jobs(job.id, spec, settled)
    if not jobs:
        return value
    await job.add_children_async(jobs)
    await job.wait_for_children_async()

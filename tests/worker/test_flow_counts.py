"""Flow parents failed by a child are counted as failed jobs: in the queue's
totals, its minute counts and /metrics' outcomes (docs/protocol.md §15)."""

from __future__ import annotations

import uuid

import pytest

from conveyor import Queue
from conveyor.client.tasks import Tasks
from conveyor.errors import JobFailedError
from support.workers import WorkerRunner, wait_until


def test_parents_failed_by_a_child_count_as_failed(
    redis_url: str, queue_name: str, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    reports = Tasks(queue_name, url=redis_url)
    other = "kids-" + uuid.uuid4().hex[:10]
    kids = Tasks(other, url=redis_url)

    @reports.task
    def report(data: str) -> str:
        return data

    @kids.task(max_failures=1)
    def part(data: str) -> str:
        if data == "bad":
            raise ValueError("bad input")
        return data

    # two trees: root <- mid <- bad child in another queue; a lone parent <- bad child
    deep = sync_queue.enqueue_flow(
        report.node("root", children=[report.node("mid", children=[part.node("bad")])])
    )
    lone = sync_queue.enqueue_flow(report.node("lone", children=[part.node("bad")]))
    worker_runner.start([reports, kids], lease=3.0, heartbeat_interval=0.2)
    for job_id in (deep.id, lone.id):
        with pytest.raises(JobFailedError, match="ChildFailedError"):
            sync_queue.wait_result(job_id, timeout=20)
    # root, mid and lone failed in `reports`; the two children in the other queue
    wait_until(lambda: sync_queue.totals()["failed"] == 3, timeout=20)
    assert sync_queue.totals()["completed"] == 0
    assert sum(m.failed for m in sync_queue.metrics_history(minutes=5)) == 3
    with Queue(other, url=redis_url) as kid_queue:
        wait_until(lambda: kid_queue.totals()["failed"] == 2, timeout=20)

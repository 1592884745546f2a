"""A worker with min_replicas whose outcome write was applied on the master
but not confirmed by a replica in time: the outcome stood, and the log says
so (not that the lease was lost and the outcome discarded)."""

from __future__ import annotations

import logging

import pytest

from conveyor import Queue
from conveyor.client.models import QueueSettings
from conveyor.client.tasks import Tasks
from conveyor.job import JobState
from support.replicas import master_with_replica, stopped_for
from support.servers import ServerFactory
from support.workers import WorkerRunner, wait_until

SETTINGS = QueueSettings(min_replicas=1, replica_timeout=0.2)


def test_an_unconfirmed_outcome_is_logged_as_written(
    server_factory: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    primary, replica = master_with_replica(server_factory)
    tasks = Tasks("orders", url=primary.url, settings=SETTINGS)

    @tasks.task
    def work(n: int) -> int:
        return n

    runner = WorkerRunner(primary.url)
    with Queue("orders", url=primary.url, settings=SETTINGS) as queue:
        job = queue.enqueue("work", 1)
        resume = stopped_for(replica, 1.5)  # the worker's first complete goes unconfirmed
        try:
            with caplog.at_level(logging.WARNING, logger="conveyor"):
                runner.start(tasks, concurrency=1)
                wait_until(lambda: queue.get(job.id).state is JobState.COMPLETED, timeout=30)
                resume.join()
                wait_until(lambda: "were written, but too few replicas" in caplog.text, timeout=10)
        finally:
            resume.join()
            runner.stop_all()
    assert "lease lost" not in caplog.text

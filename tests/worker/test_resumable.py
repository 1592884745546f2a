"""Resumable jobs through a real worker and both clients (protocol §16.7):
save_checkpoint, ResumeLater (no attempt counted), the next run resumes."""

from __future__ import annotations

from typing import Any

from conveyor import JobState, ResumeLater
from conveyor.client.tasks import Tasks
from conveyor.worker import current_job
from support.workers import WorkerRunner


def test_a_job_sleeps_without_a_slot_and_resumes_from_its_checkpoint(
    queue: Any, redis_url: str, queue_name: str, worker_runner: WorkerRunner
) -> None:
    tasks = Tasks(queue_name, url=redis_url)
    seen: list[Any] = []

    @tasks.task
    def crawl(data: dict[str, int]) -> int:
        job = current_job()
        seen.append(job.checkpoint)
        state = job.checkpoint or {"page": 0, "total": 0}
        for page in range(state["page"], data["pages"]):
            state = {"page": page + 1, "total": state["total"] + page}
            job.save_checkpoint(state)
            if page + 1 in (3, 6):  # an external wait: let go of the slot
                raise ResumeLater(0.05)
        return state["total"]

    job_id = queue.enqueue("crawl", {"pages": 8}, max_failures=1).id
    worker_runner.start(tasks)
    assert queue.wait_result(job_id, timeout=30) == sum(range(8))
    assert seen == [None, {"page": 3, "total": 3}, {"page": 6, "total": 15}]
    job = queue.get(job_id)
    assert (job.state, job.attempts, job.failures) == (JobState.COMPLETED, 1, 0)
    assert job.checkpoint == {"page": 8, "total": 28}
    events = [e.name for e in queue.events(after="0-0", count=1000)]
    assert events.count("deferred") == 2


def test_an_async_handler_checkpoints_and_resume_later_saves_state(
    queue: Any, redis_url: str, queue_name: str, worker_runner: WorkerRunner
) -> None:
    tasks = Tasks(queue_name, url=redis_url)

    @tasks.task
    async def steps(data: None) -> str:
        job = current_job()
        if job.checkpoint is None:
            job.save_checkpoint({"step": 1})
            raise ResumeLater(checkpoint={"step": 2})
        return f"resumed at {job.checkpoint['step']}"

    job_id = queue.enqueue("steps", None).id
    worker_runner.start(tasks)
    assert queue.wait_result(job_id, timeout=30) == "resumed at 2"
    assert queue.get(job_id).attempts == 1

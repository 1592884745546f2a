"""Enqueue when a SQLAlchemy session commits, and never when it rolls back.

    with Session(engine) as session, session.begin():
        session.add(order)
        job_id = task_after_commit(session, send_receipt, {"order": order.id})
        order.receipt_job = job_id                   # the id is known at once
    # committed: the job is in Redis now; a rollback would have dropped it

`enqueue_after_commit(session, queue, "task", data, **options)` does the same by task name.
Jobs wait in the session (in `session.info`) tagged with the transaction or savepoint they were
made in: the outermost commit sends them in order (pipelined per queue), a rollback drops
them, and a rolled-back savepoint (`session.begin_nested()`) drops only its own.

The hand-off is not atomic across the two stores: if Redis refuses or is unreachable at commit
time, the error is raised from `commit()` after the database committed. Sync `Session` only:
the hook runs inside `commit()`, and an `AsyncSession` would run it on the event loop.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, TypeVar, Unpack

from sqlalchemy import event
from sqlalchemy.orm import Session, SessionTransaction

from conveyor.client.models import EnqueueOptions, JobRequest
from conveyor.client.sync import Queue
from conveyor.client.tasks import Task
from conveyor.errors import ConfigurationError
from conveyor.options import new_job_id

D = TypeVar("D")
PENDING_KEY = "conveyor_after_commit"


@dataclass(frozen=True, slots=True)
class _Pending:
    queue: Queue
    request: JobRequest
    made_in: SessionTransaction


def enqueue_after_commit(
    session: Session,
    queue: Queue,
    task: str,
    data: Any = None,
    **options: Unpack[EnqueueOptions],
) -> str:
    """Enqueue `task` into `queue` when the session's transaction commits; returns the job
    id (given as `id=`, or made now). Raises ConfigurationError outside a transaction."""
    made_in = session.get_nested_transaction() or session.get_transaction()
    if made_in is None:
        raise ConfigurationError(
            "no transaction in progress on this session: call enqueue_after_commit inside "
            "`with session.begin():`, or after the session has begun (session.add, execute)"
        )
    job_id = options.get("id") or new_job_id()
    request = JobRequest(task, data, {**options, "id": job_id})
    _pending(session).append(_Pending(queue, request, made_in))
    return job_id


def task_after_commit(
    session: Session, task: Task[D, Any], data: D, **options: Unpack[EnqueueOptions]
) -> str:
    """`enqueue_after_commit` for a registered task: its queue, name and default options."""
    merged: EnqueueOptions = {**task.defaults, **options}
    return enqueue_after_commit(session, task.tasks.queue(), task.name, data, **merged)


def _pending(session: Session) -> list[_Pending]:
    if not event.contains(session, "after_commit", _after_commit):
        event.listen(session, "after_commit", _after_commit)
        event.listen(session, "after_soft_rollback", _after_rollback)
    pending: list[_Pending] = session.info.setdefault(PENDING_KEY, [])
    return pending


def _after_commit(session: Session) -> None:
    if session.in_nested_transaction():  # a savepoint released: its jobs wait for the rest
        return
    pending: list[_Pending] = session.info.pop(PENDING_KEY, [])
    by_queue: dict[Queue, list[JobRequest]] = defaultdict(list)
    for job in pending:
        by_queue[job.queue].append(job.request)
    for queue, requests in by_queue.items():
        queue.enqueue_many(requests)


def _after_rollback(session: Session, rolled_back: SessionTransaction) -> None:
    pending: list[_Pending] = session.info.get(PENDING_KEY, [])
    pending[:] = [job for job in pending if not _within(job.made_in, rolled_back)]


def _within(made_in: SessionTransaction, rolled_back: SessionTransaction) -> bool:
    """True when `made_in` is `rolled_back` or a savepoint inside it."""
    current: SessionTransaction | None = made_in
    while current is not None:
        if current is rolled_back:
            return True
        current = current.parent
    return False

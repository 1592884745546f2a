"""Enqueue after a SQLAlchemy commit, against PostgreSQL (psycopg 3) on 127.0.0.1:5432, in a
database this module creates and drops, and the suite's private Redis."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import Engine, String, create_engine, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from conveyor import JobState, Queue, Tasks
from conveyor.errors import ConfigurationError
from conveyor.integrations.sqlalchemy import enqueue_after_commit, task_after_commit
from conveyor.integrations.testing import BurstWorker, enqueued

ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    item: Mapped[str] = mapped_column(String(50))
    receipt_job: Mapped[str | None] = mapped_column(String(64))


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    name = f"conveyor_sa_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    engine = create_engine(f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}")
    try:
        Base.metadata.create_all(engine)
        yield engine
    finally:
        engine.dispose()
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_jobs_reach_redis_when_the_session_commits(engine: Engine, sync_queue: Queue) -> None:
    with Session(engine) as session, session.begin():
        order = Order(item="book")
        session.add(order)
        session.flush()
        job_id = enqueue_after_commit(session, sync_queue, "receipt", {"order": order.id})
        order.receipt_job = job_id  # the id is known inside the transaction
        enqueue_after_commit(session, sync_queue, "audit", None, priority="low")
        assert enqueued(sync_queue) == []  # nothing before the commit
    jobs = enqueued(sync_queue)
    assert [(j.id, j.task) for j in jobs[:1]] == [(job_id, "receipt")]
    assert [j.task for j in jobs] == ["receipt", "audit"]
    with Session(engine) as session:
        assert session.scalars(select(Order.receipt_job)).one() == job_id


def test_a_rollback_enqueues_nothing(engine: Engine, sync_queue: Queue) -> None:
    with pytest.raises(RuntimeError), Session(engine) as session, session.begin():
        session.add(Order(item="lost"))
        enqueue_after_commit(session, sync_queue, "receipt", 1)
        raise RuntimeError("rolled back")
    with Session(engine) as session:
        session.add(Order(item="also lost"))
        enqueue_after_commit(session, sync_queue, "receipt", 2)
        session.rollback()
        session.add(Order(item="kept"))  # the same session, a new transaction
        kept = enqueue_after_commit(session, sync_queue, "receipt", 3)
        session.commit()
    assert [(j.id, j.data) for j in enqueued(sync_queue)] == [(kept, 3)]


def test_a_rolled_back_savepoint_drops_its_own_jobs_only(
    engine: Engine, sync_queue: Queue
) -> None:
    with Session(engine) as session, session.begin():
        session.add(Order(item="outer"))
        enqueue_after_commit(session, sync_queue, "t", "outer")
        with session.begin_nested():
            enqueue_after_commit(session, sync_queue, "t", "released savepoint")
        savepoint = session.begin_nested()
        enqueue_after_commit(session, sync_queue, "t", "rolled-back savepoint")
        with session.begin_nested():
            enqueue_after_commit(session, sync_queue, "t", "inside the rolled-back one")
        savepoint.rollback()
        enqueue_after_commit(session, sync_queue, "t", "after")
        assert enqueued(sync_queue) == []
    assert [j.data for j in enqueued(sync_queue)] == ["outer", "released savepoint", "after"]


def test_outside_a_transaction_is_an_error(engine: Engine, sync_queue: Queue) -> None:
    with Session(engine) as session, pytest.raises(ConfigurationError, match="no transaction"):
        enqueue_after_commit(session, sync_queue, "t", 1)
    assert enqueued(sync_queue) == []


def test_a_task_runs_after_its_row_is_committed(
    engine: Engine, redis_url: str, queue_name: str
) -> None:
    tasks = Tasks(queue_name, url=redis_url)
    seen: list[str] = []

    @tasks.task(max_failures=1, priority="high")
    def ship(order_id: int) -> None:
        with Session(engine) as session:  # another connection sees the committed row
            seen.append(session.get_one(Order, order_id).item)

    with Session(engine) as session, session.begin():
        order = Order(item="lamp")
        session.add(order)
        session.flush()
        job_id = task_after_commit(session, ship, order.id)
    job = tasks.queue().get(job_id)
    assert job is not None and (job.priority, job.max_failures) == (0, 1)  # the task's options
    assert BurstWorker(redis_url).drain(tasks).completed == 1
    assert seen == ["lamp"]
    assert tasks.queue().get(job_id).state is JobState.COMPLETED  # type: ignore[union-attr]
    tasks.queue().close()

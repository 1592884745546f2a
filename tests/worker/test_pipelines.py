"""Pipelines (client/pipelines.py): steps in their own queues, each handed the step before's
result or the shared state, a fan-out in the middle: the Guild example end to end."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from conveyor import AsyncQueue, JobState, PermanentError, Queue, Step
from conveyor.client.tasks import Tasks
from conveyor.errors import JobFailedError, ValidationError
from support.workers import WorkerRunner

FAST = {"lease": 3.0, "heartbeat_interval": 0.2}
PLATFORMS = ("discord", "slack", "github")


class Guild:
    """The Guild design: an access check, a membership update, a fan-out to three platform
    queues, a final step; every queue its own, with its own workers."""

    def __init__(self, url: str, runner: WorkerRunner) -> None:
        tag = uuid.uuid4().hex[:8]
        self.url = url
        self.names = {n: f"{n}-{tag}" for n in ("guild", "access", "members", *PLATFORMS, "final")}
        self.tasks = {n: Tasks(q, url=url) for n, q in self.names.items()}
        self.ran: list[str] = []
        t = self.tasks

        @t["access"].task(max_failures=1)
        def check_access(req: dict[str, Any]) -> dict[str, Any]:
            self.ran.append("access")
            if req["user"] == "mallory":
                raise PermanentError("mallory may not join")
            return {**req, "allowed": True}

        @t["members"].task
        async def update_membership(req: dict[str, Any]) -> dict[str, Any]:
            self.ran.append("members")
            return {"user": req["user"], "guild": req["guild"], "member": req["allowed"]}

        for platform in PLATFORMS:

            @t[platform].task(name="grant")
            async def grant(member: dict[str, Any], platform: str = platform) -> str:
                self.ran.append(platform)
                return f"{platform}:{member['user']}@{member['guild']}"

        @t["final"].task
        def announce(grants: dict[str, str]) -> str:
            self.ran.append("final")
            return ", ".join(grants[p] for p in PLATFORMS)

        for tasks in t.values():
            runner.start(tasks, **FAST)

    def steps(self) -> list[Any]:
        q = self.names
        return [
            Step(task="check_access", queue=q["access"]),
            Step(task="update_membership", queue=q["members"], options={"priority": "high"}),
            [Step(task="grant", queue=q[p], name=p) for p in PLATFORMS],
            Step(task="announce", queue=q["final"]),
        ]


@pytest.fixture
def guild(redis_url: str, worker_runner: WorkerRunner) -> Guild:
    return Guild(redis_url, worker_runner)


def test_the_guild_pipeline_runs_end_to_end(guild: Guild) -> None:
    with Queue(guild.names["guild"], url=guild.url) as queue:
        driver = queue.enqueue_pipeline(guild.steps(), {"user": "ana", "guild": "g1"})
        assert queue.wait_result(driver.id, timeout=30) == (
            "discord:ana@g1, slack:ana@g1, github:ana@g1"
        )
        assert guild.ran[:2] == ["access", "members"] and guild.ran[-1] == "final"
        assert sorted(guild.ran[2:5]) == sorted(PLATFORMS)
        # every step's job is a child of the driver, readable as one flow
        node = queue.flow(driver.id)
        assert len(node.children) == 6
        assert {c.job.state for c in node.children if c.job} == {JobState.COMPLETED}
        members = queue.peer(guild.names["members"]).get(f"{driver.id}.1")
        assert members is not None and members.priority == 0
        assert members.data == {"user": "ana", "guild": "g1", "allowed": True}


def test_a_failed_step_fails_the_pipeline_and_nothing_after_it_runs(guild: Guild) -> None:
    with Queue(guild.names["guild"], url=guild.url) as queue:
        driver = queue.enqueue_pipeline(guild.steps(), {"user": "mallory", "guild": "g1"})
        with pytest.raises(JobFailedError, match="mallory may not join"):
            queue.wait_result(driver.id, timeout=30)
    assert guild.ran == ["access"]


def test_state_mode_hands_every_step_the_shared_state(
    redis_url: str, worker_runner: WorkerRunner
) -> None:
    tag = uuid.uuid4().hex[:8]
    first, second, driver_queue = (Tasks(f"{n}-{tag}", url=redis_url) for n in "abd")

    @first.task
    def look_up(state: dict[str, Any]) -> dict[str, Any]:
        return {"email": f"{state['user']}@example.com"}

    @second.task
    def mail(state: dict[str, Any]) -> dict[str, Any]:
        return {"sent_to": state["email"], "count": state["count"] + 1}

    @second.task
    def audit(state: dict[str, Any]) -> str:
        return "not a mapping: changes no state"

    for tasks in (first, second, driver_queue):
        worker_runner.start(tasks, **FAST)
    steps = [
        Step(task="look_up", queue=first.queue_name),
        [Step(task="mail", queue=second.queue_name), Step(task="audit", queue=second.queue_name)],
    ]

    async def run() -> Any:
        async with AsyncQueue(driver_queue.queue_name, url=redis_url) as queue:
            job = await queue.enqueue_pipeline(steps, state={"user": "ana", "count": 0})
            return await queue.wait_result(job.id, timeout=30)

    assert asyncio.run(run()) == {
        "user": "ana", "count": 1, "email": "ana@example.com", "sent_to": "ana@example.com"
    }  # fmt: skip


@pytest.mark.parametrize(
    "steps",
    [[], [Step(task="t", options={"id": "x"})], [Step(task="t", on_fail="remove")],  # type: ignore[arg-type]
     [[Step(task="t"), Step(task="t")]], [Step(task="t", queue="a b")],
     [Step(task="t", options={"delay": object()})], [Step(task="t", options={"dedup": "k"})],
     [Step(task="t", options={"update_data": False})]],
)  # fmt: skip
def test_a_bad_pipeline_writes_nothing(sync_queue: Queue, steps: list[Any]) -> None:
    with pytest.raises(ValidationError):
        sync_queue.enqueue_pipeline(steps)
    assert sum(sync_queue.counts().values()) == 0


def test_data_and_state_together_are_refused(sync_queue: Queue) -> None:
    with pytest.raises(ValidationError, match="not both"):
        sync_queue.enqueue_pipeline([Step(task="t")], {"user": "ana"}, state={"count": 0})
    with pytest.raises(ValidationError, match="mapping"):
        sync_queue.enqueue_pipeline([Step(task="t")], state=[1])  # type: ignore[arg-type]
    assert sum(sync_queue.counts().values()) == 0

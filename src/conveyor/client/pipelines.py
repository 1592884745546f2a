"""Pipelines: a flow declared as steps, each step's job in its own queue,
each handed the result of the step before (or, in state mode, the flow's
shared state mapping, which every step reads and updates). A step may be a
fan-out: several jobs at once, in any queues, after which the flow goes on.

A pipeline runs as a flow (docs/protocol.md §14): one *driver* job (task
PIPELINE_TASK, run by any worker of the queue it is enqueued in) adds each
step's jobs to itself as children and gives up its slot until they have
settled (§14.10), then adds the next step's with their results. Step jobs
have ids `<driver id>.<step>` (`.<step>.<n>` in a fan-out), so a driver run
again after a crash re-attaches the same jobs instead of new ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from conveyor import serializers
from conveyor.client.flows import FailurePolicy, FlowJob, check_node_options
from conveyor.errors import ValidationError
from conveyor.options import SpecBuilder, check_name

PIPELINE_TASK = "conveyor.pipeline"
# `remove` leaves no trace the driver could count as settled: not offered
STEP_POLICIES = ("fail", "ignore", "continue")


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """One job of a pipeline: its task and queue (None: the pipeline's), its
    key in a fan-out's result mapping (`name`, default the task), what its
    failure does (`on_fail`: fail the pipeline, or ignore it and hand on
    None, or continue at once), and enqueue options (JSON values: seconds as numbers)."""

    task: str
    queue: str | None = None
    name: str | None = None
    on_fail: FailurePolicy = "fail"
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.name or self.task


StepGroup = Step | Sequence[Step]


def pipeline_data(
    steps: Sequence[StepGroup], data: Any, state: Mapping[str, Any] | None, specs: SpecBuilder
) -> dict[str, Any]:
    """The driver job's data: the validated steps and the first input.
    Every step's options are checked now, so a bad one writes nothing."""
    if not steps:
        raise ValidationError("a pipeline needs at least one step")
    if state is not None and data is not None:
        raise ValidationError(
            "give data (the first step's input) or state (the mapping every step reads), not both"
        )
    if state is not None and not isinstance(state, Mapping):
        raise ValidationError(f"state must be a mapping, got {state!r}")
    groups = []
    for group in steps:
        members = [group] if isinstance(group, Step) else list(group)
        if not members or not all(isinstance(s, Step) for s in members):
            raise ValidationError(f"a step is a Step or a non-empty list of them: {group!r}")
        if len({s.key for s in members}) != len(members):
            raise ValidationError("the steps of a fan-out need distinct names")
        for step in members:
            if step.on_fail not in STEP_POLICIES:
                raise ValidationError(f"on_fail must be one of {STEP_POLICIES}: {step.on_fail!r}")
            if step.queue is not None:
                check_name(step.queue, "queue name")
            if "id" in step.options:
                raise ValidationError("a step's job id is the pipeline's to choose")
            check_node_options(step.options, root=False)  # a step's job is a flow child
            specs.one(step.task, None, step.options)  # validates the task and options
        groups.append([
            {"task": s.task, "queue": s.queue, "key": s.key, "on_fail": s.on_fail,
             "options": dict(s.options)}
            for s in members
        ])  # fmt: skip
    encoded = {"steps": groups, "input": data, "state": None if state is None else dict(state)}
    serializers.dumps(encoded, what="the pipeline")  # options and state must be JSON
    return encoded


def next_jobs(
    driver_id: str, spec: Mapping[str, Any], settled: Mapping[str, Any]
) -> tuple[list[FlowJob], Any]:
    """The jobs of the first step not yet settled, with the input they get;
    ([], the final value) when every step has. `settled`: results by child id
    (a child that failed under ignore / remove / continue maps to None)."""
    state = spec.get("state")
    value: Any = spec.get("input") if state is None else dict(state)
    for k, group in enumerate(spec["steps"]):
        fan_out = len(group) > 1
        ids = [f"{driver_id}.{k}.{j}" if fan_out else f"{driver_id}.{k}" for j in range(len(group))]
        if not all(i in settled for i in ids):
            jobs = [
                FlowJob(
                    task=s["task"], queue=s["queue"], data=value, on_fail=s["on_fail"],
                    options={**s["options"], "id": i},
                )
                for s, i in zip(group, ids, strict=True)
            ]  # fmt: skip
            return jobs, value
        results = [settled[i] for i in ids]
        if state is not None:
            for update in results:
                if isinstance(update, Mapping):
                    value = {**dict(value), **update}
        elif fan_out:
            value = {s["key"]: r for s, r in zip(group, results, strict=True)}
        else:
            value = results[0]
    return [], value

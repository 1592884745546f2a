"""A task's options, applied where its jobs run (protocol §6.18).

`@tasks.task(max_failures=5, timeout=60)` sets the options of the jobs that
`task.enqueue` writes; a job enqueued by name (`Queue.enqueue("task")`, the
CLI, another language) carries only what its producer gave. The worker fills
in the rest from the task before running the job (policy.lua, HSETNX): what
the job carries wins, then the task's options, then the protocol defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conveyor.client.core import QueueCore
from conveyor.client.tasks import Task
from conveyor.protocol import ops

# the options that act where a job runs, and the JobSpec field of each (ms for times)
RUN_OPTIONS = {
    "max_failures": "max_failures",
    "max_stalls": "max_stalls",
    "min_backoff": "min_backoff_ms",
    "max_backoff": "max_backoff_ms",
    "timeout": "timeout_ms",
    "result_ttl": "result_ttl_ms",
}

Policy = tuple[tuple[str, int], ...]


def task_policy(task: Task[Any, Any], core: QueueCore) -> Policy:
    """The (name, value) pairs of `task`'s run-time options, validated and
    converted as an enqueue would; empty when it declares none."""
    given = {k: v for k, v in task.defaults.items() if k in RUN_OPTIONS}
    if not given:
        return ()
    spec = core.specs.one(task.name, None, given)
    return tuple((name, int(getattr(spec, RUN_OPTIONS[name]))) for name in sorted(given))


def policies(handlers: Mapping[str, Task[Any, Any]], core: QueueCore) -> dict[str, Policy]:
    """The policy of every handler that has one."""
    found = {name: task_policy(task, core) for name, task in handlers.items()}
    return {name: policy for name, policy in found.items() if policy}


# the claim reply's field for each option it carries (result_ttl is not in the reply)
CLAIMED = {
    "max_failures": "max_failures",
    "max_stalls": "max_stalls",
    "min_backoff": "min_backoff_ms",
    "max_backoff": "max_backoff_ms",
    "timeout": "timeout_ms",
}


def carried(claimed: ops.ClaimedJob, policy: Policy) -> bool:
    """Whether the claimed job already runs on every option of `policy`: the
    claim reply gives each option in force (the record's, else the protocol
    default), so when all equal the task's, policy.lua would change nothing a
    script reads, and its round trip is saved. A job written by `task.enqueue`
    carries its task's options; one enqueued by name usually does not."""
    for name, value in policy:
        field = CLAIMED.get(name)
        if field is None or getattr(claimed, field) != value:
            return False
    return True


def policy_call(core: QueueCore, job_id: str, token: str, policy: Policy) -> ops.Call:
    return ops.policy(core.keys, job_id, token, policy)

"""What the hooks are told is counted once and in the right queue: a lost
lease the heartbeat found and the ack then reported, a stall found by the
reaper of the second of a worker's queues."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from prometheus_client import CollectorRegistry

from conveyor.hooks import Hook, Hooks, RunningJob
from conveyor.hooks import call as call_hooks
from conveyor.integrations.prometheus import PrometheusHook
from conveyor.worker.context import JobContext
from conveyor.worker.execution import Running
from conveyor.worker.outcome_hooks import tell_outcome
from conveyor.worker.pool import JobPool


class Losses(Hook):
    def __init__(self) -> None:
        self.lost: list[str] = []

    def on_lease_lost(self, job: RunningJob) -> None:
        self.lost.append(job.id)


def _running(job_id: str) -> Running:
    ctx = JobContext(
        id=job_id, queue="orders", task="t", data=None, attempt=1, token="tk", worker_id="w",
        report_progress=lambda ctx, fraction: None,
    )  # fmt: skip
    return Running(ctx=ctx, timeout=None, handler=None, problem=None)


async def test_a_lost_lease_found_by_the_heartbeat_then_the_ack_counts_once() -> None:
    losses = Losses()
    hooks = Hooks([losses])
    running = _running("j1")
    pool = SimpleNamespace(held={"j1": running}, _hooks=hooks, _loop=asyncio.get_running_loop())
    JobPool.lose(pool, ["j1"])  # type: ignore[arg-type]  # the heartbeat: lease gone
    tell_outcome(hooks, running, "lost")  # then the run's ack: refused, lease lost
    assert losses.lost == ["j1"]
    other = _running("j2")
    tell_outcome(hooks, other, "lost")  # the ack alone tells it
    assert losses.lost == ["j1", "j2"]


def test_stalls_are_counted_in_the_queue_whose_reaper_found_them() -> None:
    registry = CollectorRegistry()
    hooks = Hooks([PrometheusHook(registry)])
    for queue in ("orders", "emails", "reports"):  # one worker serving three queues
        call_hooks(hooks.worker_start, "w1", queue)
    call_hooks(hooks.on_stalled, recovered=2, failed=1, queue="orders")
    call_hooks(hooks.on_stalled, recovered=1, failed=0, queue="emails")

    def stalled(queue: str) -> float | None:
        return registry.get_sample_value("conveyor_worker_stalled_total", {"queue": queue})

    assert (stalled("orders"), stalled("emails"), stalled("reports")) == (3.0, 1.0, None)


def test_a_hook_written_without_the_queue_is_still_told() -> None:
    told: list[tuple[int, int]] = []

    class Old(Hook):
        def on_stalled(self, *, recovered: int, failed: int) -> None:  # type: ignore[override]
            told.append((recovered, failed))

    call_hooks(Hooks([Old()]).on_stalled, recovered=1, failed=2, queue="orders")
    assert told == [(1, 2)]

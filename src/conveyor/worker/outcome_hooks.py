"""The hooks told how a job's run ended (on the runner) and what became of
its outcome once written (on the ack writer): pool.JobPool calls these."""

from __future__ import annotations

from conveyor.hooks import Hooks
from conveyor.hooks import call as call_hooks
from conveyor.hooks import failed as hook_failed
from conveyor.worker.execution import Failure, Outcome, Running, Success


def after_run(hooks: Hooks, running: Running, outcome: Outcome, duration: float) -> None:
    """after_success, after_failure or after_stopped, for a run that ended."""
    ctx = running.ctx
    if type(outcome) is Success:
        for method in hooks.after_success:  # the common case, without call_hooks' layer
            try:
                method(ctx, duration=duration)
            except Exception:
                hook_failed(method)
    elif isinstance(outcome, Failure):
        running.failure = outcome
        call_hooks(hooks.after_failure, ctx, outcome.exc, error=outcome.error, duration=duration)
    else:
        call_hooks(hooks.after_stopped, ctx, duration=duration)


def tell_outcome(hooks: Hooks, running: Running, what: str) -> None:
    """The hooks of a written outcome (`what`, as acks.AckBuffer reports it)."""
    ctx = running.ctx
    if what == "completed":
        for method in hooks.on_completed:  # the common case, without call_hooks' layer
            try:
                method(ctx)
            except Exception:
                hook_failed(method)
        return
    error = running.failure.error if running.failure is not None else ""
    if what in ("retried", "delayed"):
        call_hooks(hooks.on_retry, ctx, error=error)
    elif what == "failed":
        call_hooks(hooks.on_final_failure, ctx, error=error)
    elif what in ("lost", "unwritten") and not running.lease_loss_told:
        # unwritten: left to lease expiry; told once, whether the heartbeat saw it first or not
        running.lease_loss_told = True
        call_hooks(hooks.on_lease_lost, ctx)

"""The operator's CLI in the queue's audit trail: each command that changes
something is recorded (who: the OS user at the host; what; its outcome) by
the `open_queue` it runs in, and `conveyor audit` reads the trail back."""

from __future__ import annotations

import getpass
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import click

from conveyor.client.sync import Queue
from conveyor.errors import ConveyorError

# The commands that change a queue, its jobs or its workers.
AUDITED = frozenset({
    "retry", "cancel", "remove", "promote", "pause", "resume", "purge", "abort", "quiet", "stop",
    "release-suspect", "fail-suspect", "migrate",
})  # fmt: skip
OUTCOME = "conveyor.audit.outcome"  # click context meta: what the command says it did
TARGETS = ("job_ids", "job_id", "state", "group", "worker_id", "all_failed")


def who() -> str:
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no name for this uid (a container)
        user = "uid?"
    return f"{user}@{socket.gethostname()}"


def note(outcome: str) -> None:
    """Say what the running command did, for its audit entry."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.find_root().meta[OUTCOME] = outcome


def _target(params: dict[str, object]) -> str:
    parts = []
    for name in TARGETS:
        value = params.get(name)
        if isinstance(value, tuple):
            value = " ".join(str(v) for v in value)
        if value is True:
            value = "all failed" if name == "all_failed" else name
        if value:
            parts.append(str(value))
    return " ".join(parts) or "queue"


@contextmanager
def audited(queue: Queue) -> Iterator[None]:
    """Record the current command in `queue`'s audit trail when it changes something."""
    ctx = click.get_current_context(silent=True)
    if ctx is None or ctx.command.name not in AUDITED:
        yield
        return
    outcome = None
    try:
        yield
    except click.Abort:
        outcome = "not confirmed"
        raise
    except (click.ClickException, ConveyorError) as exc:
        outcome = f"refused: {exc}"
        raise
    finally:
        found = outcome or str(ctx.find_root().meta.get(OUTCOME, "done"))
        try:
            queue.record_audit(who=who(), action=str(ctx.command.name),
                               target=_target(ctx.params), outcome=found, source="cli")  # fmt: skip
        except ConveyorError as exc:  # the action stands; say the record is missing
            click.echo(f"warning: not recorded in the audit trail: {exc}", err=True)

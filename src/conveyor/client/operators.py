"""What operators' tools add to a queue, decoded without I/O for both client
shells: the latency of its waiting jobs, the audit trail of their actions, and
commands to a worker (quiet, stop).

    queue.latency()                       # s the next waiting job has waited, or None
    queue.record_audit(who="ann", action="retry", target="job-1", outcome="retried job-1")
    queue.audit(count=100)                # [AuditEntry], newest first
    queue.quiet_worker(worker_id)         # it stops claiming, finishes what it runs
    queue.stop_worker(worker_id)          # it stops as on SIGTERM
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from conveyor.errors import ValidationError
from conveyor.protocol import ops
from conveyor.protocol.keys import WORKER_COMMANDS, QueueKeys

# The audit stream keeps about this many entries (XADD MAXLEN ~).
AUDIT_KEPT = 10_000
# Entries one read returns at most.
AUDIT_READ = 1_000
# Groups whose next job the latency looks at (as inspect.MAX_GROUPS_SHOWN).
GROUPS_LOOKED_AT = 200
AUDIT_FIELDS = ("who", "action", "target", "outcome", "source")
FIELD_LIMIT = 1_000  # characters kept of each field


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One operator's action: who (the authenticated user, or the OS user of
    the CLI), what on which target, its outcome, and where it came from."""

    at: datetime  # Redis time of the write
    who: str
    action: str
    target: str
    outcome: str
    source: str  # "dashboard", "cli", or what the caller named


def audit_fields(*, who: str, action: str, target: str, outcome: str, source: str) -> list[str]:
    """XADD field-value pairs; each field text, cut at FIELD_LIMIT characters."""
    values = {"who": who, "action": action, "target": target, "outcome": outcome,
              "source": source}  # fmt: skip
    pairs: list[str] = []
    for name in AUDIT_FIELDS:
        value = values[name]
        if not isinstance(value, str):
            raise ValidationError(f"audit {name} must be text, got {value!r}")
        pairs += [name, value[:FIELD_LIMIT]]
    return pairs


def check_count(count: int) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= AUDIT_READ:
        raise ValidationError(f"count must be an integer in [1, {AUDIT_READ}], got {count!r}")
    return count


def decode_audit(entries: Sequence[Any] | None) -> list[AuditEntry]:
    """XREVRANGE output as AuditEntry, in its order."""
    found = []
    for stream_id, raw in entries or ():
        fields = {ops.text(k): ops.text(v) for k, v in raw.items()}
        ms = int(ops.text(stream_id).partition("-")[0])
        found.append(AuditEntry(datetime.fromtimestamp(ms / 1000, UTC),
                                **{n: fields.get(n, "") for n in AUDIT_FIELDS}))  # fmt: skip
    return found


def check_command(command: str) -> str:
    if command not in WORKER_COMMANDS:
        raise ValidationError(f"a worker command is one of {WORKER_COMMANDS}, got {command!r}")
    return command


def head_keys(keys: QueueKeys, groups: Sequence[Any]) -> list[str]:
    """The indexes whose first job is next to run: the ungrouped jobs' and
    those of the first GROUPS_LOOKED_AT groups."""
    names = sorted({ops.text(g) for g in groups})[:GROUPS_LOOKED_AT]
    return [keys.ready, *(keys.group_ready(g) for g in names)]


def latency(now_ms: int, due: Sequence[Sequence[Any]]) -> float | None:
    """Seconds the longest-waiting of the next jobs has been due: `due` has
    each one's HMGET of `run_at`, `created_at` (ms); None when none waits."""
    since = [int(ops.text(r if r is not None else c)) for r, c in due if (r or c) is not None]
    return max(0.0, (now_ms - min(since)) / 1000) if since else None

"""Calls of the observability scripts: the metrics history a worker writes
on its heartbeat, and the lines a handler writes to its job's own log
(docs/protocol.md §15)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from conveyor.protocol.keys import QueueKeys
from conveyor.protocol.ops import Arg, Call

JOB_LOG_MAX_LINES = 1000  # a job's log keeps its last this many lines
JOB_LOG_MAX_LINE = 4096  # characters; a longer line is cut
JOB_LOG_TTL_MS = 7 * 24 * 3_600_000  # while the job lives on (its end sets the record's)


def record_metrics(
    keys: QueueKeys,
    *,
    timings: Mapping[str, int],
    retention_ms: int,
    completed: int = 0,
    failed: int = 0,
    retried: int = 0,
    stalled: int = 0,
) -> Call:
    """The timings a worker measured (§15). The outcome counts are the ending
    scripts' own; these arguments add to them, for outcomes no script counted."""
    args: list[Arg] = [completed, failed, retried, stalled, retention_ms]
    for name, increment in timings.items():
        args.extend((name, increment))
    return Call("record_metrics", (keys.base, keys.totals), tuple(args))


def job_log(keys: QueueKeys, *, job_id: str, token: str, lines: Sequence[str]) -> Call:
    cut = [line[:JOB_LOG_MAX_LINE] for line in lines]
    return Call("job_log", (keys.base,), (job_id, token, JOB_LOG_MAX_LINES, JOB_LOG_TTL_MS, *cut))

"""Calls of the schedule scripts (repeatable jobs: schedule, schedule_next,
unschedule; docs/protocol.md §6.13). Pure: no I/O."""

from __future__ import annotations

from conveyor.protocol.keys import QueueKeys
from conveyor.protocol.ops import Call, JobSpec


def _schedule_keys(keys: QueueKeys) -> tuple[str, ...]:
    return (
        keys.base, keys.meta, keys.ready, keys.scheduled, keys.marker, keys.events,
        keys.completed, keys.failed, keys.schedules,
    )  # fmt: skip


def schedule(
    keys: QueueKeys,
    schedule_id: str,
    *,
    first_tick_ms: int,
    cron: str | None,
    every_ms: int | None,
    template: JobSpec,
    events_maxlen: int,
    tz: str | None = None,
    start_ms: int | None = None,
    end_ms: int | None = None,
    limit: int | None = None,
) -> Call:
    """Create or replace a repeatable job; see schedule.lua (tz, start, end
    and limit: docs/protocol.md §16.6)."""
    t = template

    def given(value: str | int | None) -> str | int:
        return "" if value is None else value

    return Call(
        "schedule",
        _schedule_keys(keys),
        (
            events_maxlen, schedule_id, first_tick_ms, cron or "",
            "" if every_ms is None else every_ms, t.task, t.data, t.priority, t.max_failures,
            t.max_stalls, t.min_backoff_ms, t.max_backoff_ms, t.timeout_ms, t.result_ttl_ms,
            t.group, given(tz), given(start_ms), given(end_ms), given(limit),
        ),
    )  # fmt: skip


def schedule_next(
    keys: QueueKeys, schedule_id: str, *, fired_ms: int, next_ms: int, events_maxlen: int
) -> Call:
    return Call(
        "schedule_next",
        _schedule_keys(keys),
        (events_maxlen, schedule_id, fired_ms, next_ms),
    )


def unschedule(keys: QueueKeys, schedule_id: str) -> Call:
    return Call(
        "unschedule", (keys.base, keys.ready, keys.scheduled, keys.schedules), (schedule_id,)
    )

"""The lifecycle events stream, decoded."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from conveyor.protocol.events import job_attempts
from conveyor.protocol.ops import text
from conveyor.timeutil import from_ms


@dataclass(frozen=True, slots=True)
class Event:
    """One job's event from `<prefix>:{<queue>}:events`: `name` is created, updated,
    blocked, active, progress, completed, retried, stalled, failed, cancelled,
    abort_requested, … (protocol §11). The jobs of one entry share its `stream_id`."""

    stream_id: str
    name: str
    job_id: str
    fields: dict[str, str]

    @property
    def at(self) -> datetime | None:
        """When Redis added the event (from the stream id)."""
        return from_ms(int(self.stream_id.split("-")[0]))


def decode_entries(entries: Any) -> list[Event]:
    """Stream entries as events, one per job: an entry that names several jobs (`ids`,
    protocol §11) gives one event for each, with its own `attempt` when it has one."""
    events = []
    for stream_id, raw in entries:
        fields = {text(k): text(v) for k, v in raw.items()}
        sid, name, ids = text(stream_id), fields.pop("event", ""), fields.pop("ids", None)
        if ids is None:
            events.append(Event(sid, name, fields.pop("id", ""), fields))
            continue
        for job_id, attempt in job_attempts(ids, fields.pop("attempts", None)):
            own = dict(fields) if attempt is None else {**fields, "attempt": attempt}
            events.append(Event(sid, name, job_id, own))
    return events


def decode_events(reply: Any) -> list[Event]:
    """XREAD output (list or RESP3 dict form) as events."""
    if not reply:
        return []
    streams = reply.items() if isinstance(reply, dict) else reply
    events: list[Event] = []
    for _, entries in streams:
        events.extend(decode_entries(entries))
    return events

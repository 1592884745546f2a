"""The lifecycle events stream, decoded."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from conveyor.protocol.ops import text
from conveyor.timeutil import from_ms


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of `<prefix>:{<queue>}:events`: `name` is created, updated,
    blocked, active, progress, completed, retried, stalled, failed, cancelled or
    abort_requested."""

    stream_id: str
    name: str
    job_id: str
    fields: dict[str, str]

    @property
    def at(self) -> datetime | None:
        """When Redis added the event (from the stream id)."""
        return from_ms(int(self.stream_id.split("-")[0]))


def decode_entries(entries: Any) -> list[Event]:
    events = []
    for stream_id, raw in entries:
        fields = {text(k): text(v) for k, v in raw.items()}
        events.append(Event(text(stream_id), fields.pop("event", ""), fields.pop("id", ""), fields))
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

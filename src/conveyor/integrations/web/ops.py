"""What the operators' views compute from a queue's reads: its latency and
throughput, the stuck-queue warning, chart ranges, and who is acting."""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from conveyor import metrics
from conveyor.client.aio import AsyncQueue
from conveyor.client.inspect import QueueOverview
from conveyor.integrations.prometheus import shown_name
from conveyor.job import JobState
from conveyor.metrics import MinuteCounts

LANE = ":failures"  # `<queue>:failures` names a queue's failure lane
# A backlog whose next job has waited this long, with live workers and no
# completion in the last full minute, is flagged as stuck.
STUCK_AFTER = 60.0
# Chart ranges: minutes shown, minutes per point, the label of a point's span.
RANGES = {"1h": (60, 1, "min"), "24h": (1440, 10, "10 min"), "7d": (10080, 60, "h")}


@dataclass(frozen=True, slots=True)
class Pace:
    """A queue's latency (s the next job has waited; None: none waits),
    completions per minute, and whether it looks stuck."""

    latency: float | None
    per_minute: float
    stuck: bool


def stuck(seen: QueueOverview, workers: int, latency: float | None,
          history: list[MinuteCounts]) -> bool:  # fmt: skip
    """Backlog, live workers, not paused, the next job waiting over a minute,
    and no job finished in the last full minute or this one."""
    finished = sum(m.completed + m.failed + m.retried for m in history[-2:])
    return (
        seen.counts[JobState.WAITING] > 0 and workers > 0 and not seen.paused
        and (latency or 0.0) >= STUCK_AFTER and finished == 0
    )  # fmt: skip


async def pace(queue: AsyncQueue, seen: QueueOverview, workers: int) -> Pace:
    latency, history = await asyncio.gather(
        queue.latency(), queue.metrics_history(minutes=metrics.THROUGHPUT_MINUTES + 1)
    )
    return Pace(latency, metrics.per_minute(history), stuck(seen, workers, latency, history))


def named(queue: AsyncQueue, seen: QueueOverview) -> QueueOverview:
    """The overview under the name its pages use (`<queue>:failures` for a lane)."""
    return dataclasses.replace(seen, name=shown_name(queue))


def chart_range(request: Request) -> str:
    wanted = request.query_params.get("range", "1h")
    return wanted if wanted in RANGES else "1h"


def bucketed(history: list[MinuteCounts], width: int) -> dict[str, Any]:
    """Minute counts summed `width` minutes per point, for the chart (epoch seconds)."""
    points: dict[str, list[int]] = {"t": [], "completed": [], "failed": [], "retried": []}
    for start in range(0, len(history), width):
        span = history[start : start + width]
        points["t"].append(int(span[0].minute.timestamp()))
        points["completed"].append(sum(m.completed for m in span))
        points["failed"].append(sum(m.failed for m in span))
        points["retried"].append(sum(m.retried for m in span))
    return points


def who(request: Request) -> str:
    """The acting user: the host app's authenticated user, else the basic-auth
    name, else the token's holder, else the client's address."""
    user = request.scope.get("user")
    if getattr(user, "is_authenticated", False):
        return str(getattr(user, "display_name", "") or user)
    scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "basic":
        try:
            return base64.b64decode(encoded, validate=True).decode().partition(":")[0]
        except (binascii.Error, ValueError):
            pass
    if request.app.state.settings.token:
        return "token holder"
    client = request.client
    return f"anonymous ({client.host})" if client else "anonymous"

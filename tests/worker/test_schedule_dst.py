"""Cron schedules across daylight-saving changes (protocol §16.6): a wall time
the spring change skips fires once, at the first minute after the gap with its
own seconds, unless the hour field is `*`; a wall time the autumn change
repeats fires twice. Through the worker's tick computation and the client's
next fire times."""

from __future__ import annotations

import asyncio
import types
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from conveyor import AsyncQueue
from conveyor.timing import next_tick
from conveyor.worker.waiting import advance

PARIS = ZoneInfo("Europe/Paris")  # 2027: spring 28 Mar 02:00 -> 03:00, autumn 31 Oct 03:00 -> 02:00


def _ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def _ticks(cron: str, start: datetime, count: int, tz: str = "Europe/Paris") -> list[str]:
    """The worker's ticks from `start`, each as local time with its UTC offset."""
    tick, out = _ms(start), []
    for _ in range(count):
        tick = next_tick(cron=cron, every_ms=None, fired_ms=tick, now_ms=tick, tz=tz)
        out.append(datetime.fromtimestamp(tick / 1000, ZoneInfo(tz)).strftime("%d %H:%M:%S%z"))
    return out


SPRING = datetime(2027, 3, 28, 0, 0, tzinfo=PARIS)


@pytest.mark.parametrize(
    ("cron", "expected"),
    [
        # a skipped wall time fires once, at the first minute after the gap, seconds kept
        ("30 2 * * *", ["28 03:00:00+0200", "29 02:30:00+0200", "30 02:30:00+0200"]),
        ("15 30 2 * * *", ["28 03:00:15+0200", "29 02:30:15+0200", "30 02:30:15+0200"]),
        # every gap time of that day moves to the same instant: one firing
        ("*/20 2 * * *", ["28 03:00:00+0200", "29 02:00:00+0200", "29 02:20:00+0200"]),
        # a moved time that meets a time of the expression fires once
        ("0 2,3 * * *", ["28 03:00:00+0200", "29 02:00:00+0200", "29 03:00:00+0200"]),
        ("30 2,3 * * *", ["28 03:00:00+0200", "28 03:30:00+0200", "29 02:30:00+0200"]),
        # an hour field of `*`: a gap time is skipped, the next one that exists follows
        ("45 * * * *", ["28 00:45:00+0100", "28 01:45:00+0100", "28 03:45:00+0200"]),
    ],
)
def test_spring_forward_fires_a_skipped_wall_time_once(cron: str, expected: list[str]) -> None:
    assert _ticks(cron, SPRING, 3) == expected


@pytest.mark.parametrize(
    ("cron", "expected"),
    [
        ("30 2 * * *", ["31 02:30:00+0200", "31 02:30:00+0100", "01 02:30:00+0100"]),
        ("0 * * * *", ["31 02:00:00+0200", "31 02:00:00+0100", "31 03:00:00+0100"]),
    ],
)
def test_fall_back_fires_a_repeated_wall_time_twice(cron: str, expected: list[str]) -> None:
    assert _ticks(cron, datetime(2027, 10, 31, 1, 30, tzinfo=PARIS), 3) == expected


def test_the_worker_queues_the_tick_after_the_gap(redis_url: str, queue_name: str) -> None:
    """advance() (the worker's step after claiming a tick) across the change."""

    async def run() -> tuple[list[datetime], list[datetime]]:
        queue = AsyncQueue(queue_name, url=redis_url)
        try:
            await queue.schedule(
                "nightly", "t", cron="30 2 * * *", tz="Europe/Paris", start=SPRING
            )
            before = await queue.next_runs("nightly", count=3)
            (info,) = await queue.schedules()
            claimed: Any = types.SimpleNamespace(id=info.job_id, schedule="nightly")
            await advance(queue, claimed, _ms(before[0]))
            return before, await queue.next_runs("nightly", count=2)
        finally:
            await queue.close()

    before, after = asyncio.run(run())
    local = [t.astimezone(PARIS).strftime("%d %H:%M%z") for t in before]
    assert local == ["28 03:00+0200", "29 02:30+0200", "30 02:30+0200"]
    assert [t.astimezone(UTC) for t in after] == [t.astimezone(UTC) for t in before[1:]]

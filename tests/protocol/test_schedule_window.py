"""Schedules with a time zone, a start, an end and a number of runs
(schedule.lua, schedule_next.lua, include/schedule.lua; protocol §16.6)."""

from __future__ import annotations

from conveyor.protocol import schedules

from .harness import MAXLEN, Proto


def _schedule(q: Proto, sid: str, first: int, **window: object) -> list[str]:
    call = schedules.schedule(
        q.keys, sid, first_tick_ms=first, cron=None, every_ms=1_000,
        template=q.spec("template"), events_maxlen=MAXLEN, **window,  # type: ignore[arg-type]
    )  # fmt: skip
    return [str(x, "utf-8") if isinstance(x, bytes) else str(x) for x in q.run(call)]


def test_the_window_is_stored_and_ticks_are_counted(q: Proto) -> None:
    first = q.now() + 60_000
    assert _schedule(q, "s", first, tz="Europe/Paris", start_ms=first, end_ms=first + 5_000,
                     limit=3)[0] == f"s@{first}"  # fmt: skip
    stored = q.schedule_hash("s")
    assert (stored["tz"], stored["start"], stored["end"], stored["limit"], stored["runs"]) == (
        "Europe/Paris", str(first), str(first + 5_000), "3", "1",
    )  # fmt: skip
    assert q.schedule_next("s", first, first + 1_000) == 1
    assert q.schedule_hash("s")["runs"] == "2"


def test_the_schedule_ends_after_its_last_run(q: Proto) -> None:
    first = q.now() + 60_000
    _schedule(q, "s", first, limit=2)
    assert q.schedule_next("s", first, first + 1_000) == 1
    assert q.schedule_next("s", first + 1_000, first + 2_000) == 2  # two runs made: ended
    stored = q.schedule_hash("s")
    assert "next" not in stored and "job" not in stored and int(stored["ended"]) <= q.now()
    assert q.job(f"s@{first + 2_000}") == {}
    assert q.r.zscore(q.keys.schedules, "s") == float("inf")
    assert q.schedule_next("s", first + 1_000, first + 2_000) == 0  # nothing pending any more


def test_the_schedule_ends_at_its_end_date(q: Proto) -> None:
    first = q.now() + 60_000
    _schedule(q, "s", first, end_ms=first + 1_500)
    assert q.schedule_next("s", first, first + 1_000) == 1
    assert q.schedule_next("s", first + 1_000, first + 2_000) == 2
    assert q.job(f"s@{first + 2_000}") == {}


def test_a_redefinition_counts_its_runs_afresh(q: Proto) -> None:
    first = q.now() + 60_000
    _schedule(q, "s", first, limit=5)
    q.schedule_next("s", first, first + 1_000)
    assert q.schedule_hash("s")["runs"] == "2"
    _schedule(q, "s", first + 10_000, limit=5)
    assert q.schedule_hash("s")["runs"] == "1"

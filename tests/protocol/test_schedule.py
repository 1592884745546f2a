"""schedule.lua: creating or replacing a repeatable job and its first tick's job."""

from __future__ import annotations

from .harness import HALF, SEQ_SPAN, Proto

TEMPLATE = dict(
    task="send", data={"to": "x"}, priority=7, max_failures=4, max_stalls=2, min_backoff=0.5,
    max_backoff=9, timeout=3, result_ttl=60,
)  # fmt: skip


def test_creates_the_schedule_and_its_first_tick_job_delayed(q: Proto) -> None:
    tick = q.now() + 60_000
    q.clear_marker()
    before = q.now()
    assert q.schedule("s1", tick, every_ms=60_000, group="g1", **TEMPLATE) == (
        f"s1@{tick}", "delayed",
    )  # fmt: skip
    assert q.schedule_hash("s1") == {
        "cron": "", "every": "60000", "task": "send", "data": '{"to":"x"}', "priority": "7",
        "max_failures": "4", "max_stalls": "2", "min_backoff": "500", "max_backoff": "9000",
        "timeout": "3000", "result_ttl": "60000", "group": "g1",
        "next": str(tick), "job": f"s1@{tick}", "runs": "1",
    }  # fmt: skip
    job = q.job(f"s1@{tick}")
    created = int(job.pop("created_at"))
    assert before <= created <= q.now()
    assert job == {
        "state": "delayed", "task": "send", "data": '{"to":"x"}', "priority": "7",
        "seq": str(HALF + 1), "attempts": "0", "failures": "0", "stalls": "0",
        "max_failures": "4", "max_stalls": "2", "min_backoff": "500", "max_backoff": "9000",
        "timeout": "3000", "result_ttl": "60000", "group": "g1", "run_at": str(tick),
        "schedule": "s1",
    }  # fmt: skip
    assert q.score(q.keys.scheduled, f"s1@{tick}") == tick
    assert q.members(q.keys.ready) == []
    assert q.members(q.keys.group_ready("g1")) == []
    assert q.score(q.keys.schedules, "s1") == tick
    assert q.marker_set()  # an idle worker recomputes how long to sleep
    assert q.events() == [{"event": "created", "id": f"s1@{tick}", "state": "delayed"}]


def test_a_cron_schedule_keeps_its_expression_and_no_interval(q: Proto) -> None:
    tick = q.now() + 60_000
    q.schedule("c", tick, cron="*/5 * * * *")
    stored = q.schedule_hash("c")
    assert (stored["cron"], stored["every"]) == ("*/5 * * * *", "")
    assert (stored["next"], stored["job"]) == (str(tick), f"c@{tick}")


def test_a_first_tick_already_due_is_waiting_in_its_group(q: Proto) -> None:
    tick = q.now() - 1_000
    assert q.schedule("s", tick, every_ms=1_000, group="g") == (f"s@{tick}", "waiting")
    job_id = f"s@{tick}"
    assert q.job(job_id)["state"] == "waiting"
    assert q.score(q.keys.group_ready("g"), job_id) == 1000 * SEQ_SPAN + HALF + 1
    assert q.members(q.keys.groups) == ["g"]
    assert q.members(q.keys.scheduled) == []
    assert q.score(q.keys.schedules, "s") == tick
    (claimed,) = q.claim().jobs
    assert (claimed.id, claimed.schedule) == (job_id, "s")


def test_replacing_deletes_the_pending_job_that_has_not_started(q: Proto) -> None:
    old, new = q.now() + 60_000, q.now() + 120_000
    q.schedule("s", old, cron="* * * * *", data=1)
    assert q.schedule("s", new, every_ms=5_000, task="other", data=2) == (f"s@{new}", "delayed")
    assert q.r.exists(q.keys.job(f"s@{old}")) == 0
    assert q.members(q.keys.scheduled) == [f"s@{new}"]
    stored = q.schedule_hash("s")
    assert (stored["cron"], stored["every"], stored["task"], stored["data"]) == (
        "", "5000", "other", "2",
    )  # fmt: skip
    assert (stored["next"], stored["job"]) == (str(new), f"s@{new}")
    assert q.score(q.keys.schedules, "s") == new
    assert q.members(q.keys.schedules) == ["s"]
    job = q.job(f"s@{new}")
    assert (job["task"], job["data"], job["schedule"]) == ("other", "2", "s")
    assert [e["id"] for e in q.events("created")] == [f"s@{old}", f"s@{new}"]


def test_replacing_takes_a_waiting_grouped_pending_job_out_of_its_group(q: Proto) -> None:
    due = q.now() - 1_000
    q.schedule("s", due, every_ms=1_000, group="g")
    assert q.members(q.keys.group_ready("g")) == [f"s@{due}"]
    later = q.now() + 60_000
    q.schedule("s", later, every_ms=1_000, group="g")
    assert q.r.exists(q.keys.job(f"s@{due}")) == 0
    assert q.members(q.keys.group_ready("g")) == []
    assert q.members(q.keys.scheduled) == [f"s@{later}"]


def test_replacing_at_the_same_tick_recreates_the_job_from_the_new_template(q: Proto) -> None:
    tick = q.now() + 60_000
    q.schedule("s", tick, every_ms=1_000, data=1, priority=5)
    assert q.schedule("s", tick, every_ms=1_000, data=2, priority=3) == (f"s@{tick}", "delayed")
    job = q.job(f"s@{tick}")
    assert (job["data"], job["priority"], job["seq"]) == ("2", "3", str(HALF + 2))
    assert q.members(q.keys.scheduled) == [f"s@{tick}"]


def test_a_running_pending_job_is_left_alone(q: Proto) -> None:
    fired = q.now() - 1_000
    q.schedule("s", fired, every_ms=1_000, data=1)
    running_id = f"s@{fired}"
    (claimed,) = q.claim(token="t").jobs
    assert (claimed.id, claimed.schedule) == (running_id, "s")
    running = q.job(running_id)
    new = q.now() + 60_000
    assert q.schedule("s", new, every_ms=1_000, data=2) == (f"s@{new}", "delayed")
    assert q.job(running_id) == running
    assert q.members(q.keys.active) == [running_id]
    assert q.schedule_hash("s")["job"] == f"s@{new}"
    # its worker's schedule_next finds `next` moved on and adds nothing
    assert q.schedule_next("s", fired, fired + 1_000) == 0
    assert q.r.exists(q.keys.job(f"s@{fired + 1_000}")) == 0
    assert q.complete_one(running_id, "t")
    assert q.members(q.keys.scheduled) == [f"s@{new}"]


def test_a_finished_pending_job_is_kept(q: Proto) -> None:
    fired = q.now() - 1_000
    q.schedule("s", fired, every_ms=1_000)
    q.claim(token="t")
    assert q.complete_one(f"s@{fired}", "t")  # its worker never advanced the schedule
    new = q.now() + 60_000
    q.schedule("s", new, every_ms=1_000)
    assert q.job(f"s@{fired}")["state"] == "completed"
    assert q.members(q.keys.completed) == [f"s@{fired}"]
    assert q.schedule_hash("s")["job"] == f"s@{new}"


def test_replacing_one_schedule_leaves_the_others_alone(q: Proto) -> None:
    a, b = q.now() + 60_000, q.now() + 90_000
    q.schedule("a", a, every_ms=1_000)
    q.schedule("b", b, every_ms=1_000)
    before = (q.schedule_hash("b"), q.job(f"b@{b}"))
    q.schedule("a", a + 5, every_ms=1_000)
    assert (q.schedule_hash("b"), q.job(f"b@{b}")) == before
    assert q.members(q.keys.schedules) == ["a", "b"]
    assert q.members(q.keys.scheduled) == [f"a@{a + 5}", f"b@{b}"]


def test_rescheduling_onto_a_tick_that_already_ran_leaves_a_pending_job(q: Proto) -> None:
    tick = q.now() + 60_000  # the next cron time
    q.schedule("nightly", tick, cron="0 3 * * *")
    assert q.promote(f"nightly@{tick}") == 1  # "run it now"
    q.claim(token="t")
    assert q.schedule_next("nightly", tick, tick + 86_400_000) == 1
    assert q.complete_one(f"nightly@{tick}", "t")
    # the app restarts and declares its schedule again: the next cron time is still `tick`,
    # whose job already ran: refused, so the client sends the tick after it
    assert q.schedule("nightly", tick, cron="0 3 * * *") == ("", "taken")
    assert q.job(f"nightly@{tick}")["state"] == "completed"  # untouched
    assert q.schedule("nightly", tick + 86_400_000, cron="0 3 * * *")[1] == "delayed"
    pending = q.schedule_hash("nightly")["job"]
    assert q.job(pending)["state"] in ("waiting", "delayed")

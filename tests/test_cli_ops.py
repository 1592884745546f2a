"""The operator's commands through click's CliRunner against the session's Redis."""

from __future__ import annotations

import json
from typing import Any

import redis
from click.testing import CliRunner

from conveyor import JobState, Queue
from conveyor.client.transport import SyncRunner
from conveyor.integrations.cli import main
from conveyor.protocol import ops


def _run(*args: str, url: str, input: str | None = None) -> Any:
    return CliRunner().invoke(main, [*args, "--url", url], input=input)


def _fail_all(queue: Queue, redis_client: redis.Redis, count: int) -> None:
    runner = SyncRunner(redis_client, queue.core.scripts)
    claim = ops.claim(
        queue.core.keys, worker_id="w", count=count, lease_ms=10_000, token="t", promote=10,
        events_maxlen=100,
    )  # fmt: skip
    ids = [j.id for j in ops.decode_claim(runner.run(claim)).jobs]
    items = [ops.FailItem(i, "t", "Traceback: boom", True, None, 0.0) for i in ids]
    runner.run(ops.fail(queue.core.keys, items, events_maxlen=100))


def test_queues_table_and_json(redis_url: str, queue_name: str, sync_queue: Queue) -> None:
    sync_queue.enqueue("t", None)
    sync_queue.enqueue("t", None, delay=60)
    shown = _run("queues", url=redis_url)
    assert shown.exit_code == 0, shown.output
    assert shown.output.startswith("queue ")
    line = next(x for x in shown.output.splitlines() if x.startswith(queue_name + " "))
    assert line.split()[1:4] == ["4", "1", "1"]  # protocol version, waiting, delayed
    rows = json.loads(_run("queues", "--json", url=redis_url).output)
    mine = next(r for r in rows if r["queue"] == queue_name)
    assert mine["counts"]["waiting"] == 1 and mine["paused"] is False
    assert mine["protocol_version"] == 4


def test_info_and_jobs_on_a_missing_queue_say_so(redis_url: str) -> None:
    for args in (["info", "no-such-queue"], ["jobs", "list", "no-such-queue"]):
        shown = _run(*args, url=redis_url)
        assert shown.exit_code == 1
        assert "no queue named 'no-such-queue'" in shown.output


def test_jobs_list_pages_with_dates(redis_url: str, queue_name: str, sync_queue: Queue) -> None:
    for n in range(5):
        sync_queue.enqueue("send", {"n": n}, id=f"j{n}")
    shown = _run("jobs", "list", queue_name, "waiting", "--offset", "1", "--limit", "2",
                 url=redis_url)  # fmt: skip
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert [x.split()[0] for x in lines[1:3]] == ["j1", "j2"]
    assert lines[-1] == "2-3 of 5 waiting"
    assert "20" in lines[1] and ":" in lines[1]  # a date, not an epoch float
    data = json.loads(_run("jobs", "list", queue_name, "--json", url=redis_url).output)
    assert [j["id"] for j in data] == [f"j{n}" for n in range(5)]


def test_jobs_show_has_error_and_events(
    redis_url: str, queue_name: str, sync_queue: Queue, redis_client: redis.Redis
) -> None:
    sync_queue.enqueue("send", {"to": "a"}, id="bad", max_failures=1)
    _fail_all(sync_queue, redis_client, 1)
    shown = _run("jobs", "show", queue_name, "bad", url=redis_url)
    assert shown.exit_code == 0, shown.output
    assert "state: failed" in shown.output and "Traceback: boom" in shown.output
    assert "created" in shown.output and "  failed  error: Traceback: boom" in shown.output
    as_json = json.loads(_run("jobs", "show", queue_name, "bad", "--json", url=redis_url).output)
    assert [e["event"] for e in as_json["events"]] == ["created", "active", "failed"]
    missing = _run("jobs", "show", queue_name, "nope", url=redis_url)
    assert missing.exit_code == 1 and "no job 'nope'" in missing.output


def test_retry_cancel_promote_remove(
    redis_url: str, queue_name: str, sync_queue: Queue, redis_client: redis.Redis
) -> None:
    for n in range(3):
        sync_queue.enqueue("t", None, id=f"f{n}", max_failures=1)
    _fail_all(sync_queue, redis_client, 3)
    assert _run("retry", queue_name, "f0", url=redis_url).output == "f0: done\n"
    assert sync_queue.get("f0").state is JobState.WAITING
    shown = _run("retry", queue_name, "--all-failed", "--json", url=redis_url)
    assert json.loads(shown.output) == {"retried": 2}
    sync_queue.enqueue("t", None, id="later", delay=3600)
    assert _run("promote", queue_name, "later", url=redis_url).exit_code == 0
    assert sync_queue.get("later").state is JobState.WAITING
    again = _run("promote", queue_name, "later", url=redis_url)
    assert again.exit_code == 1 and "not applied" in again.output
    assert _run("cancel", queue_name, "f1", url=redis_url).exit_code == 0
    assert sync_queue.get("f1") is None
    assert _run("remove", queue_name, "f2", "later", url=redis_url).exit_code == 0
    assert sync_queue.get("f2") is None and sync_queue.get("later") is None


def test_pause_resume_queue_and_group(redis_url: str, queue_name: str, sync_queue: Queue) -> None:
    sync_queue.enqueue("t", None, group="acme")
    assert _run("pause", queue_name, url=redis_url).exit_code == 0
    assert sync_queue.overview().paused
    assert _run("resume", queue_name, url=redis_url).exit_code == 0
    assert not sync_queue.overview().paused
    assert _run("pause", queue_name, "--group", "acme", url=redis_url).exit_code == 0
    assert sync_queue.overview().groups[0].paused
    assert _run("resume", queue_name, "--group", "acme", url=redis_url).exit_code == 0
    assert not sync_queue.overview().groups[0].paused


def test_schedules_lists_next_runs(redis_url: str, queue_name: str, sync_queue: Queue) -> None:
    sync_queue.schedule("nightly", "report", {"full": True}, cron="0 3 * * *")
    shown = _run("schedules", queue_name, url=redis_url)
    assert shown.exit_code == 0, shown.output
    assert "nightly" in shown.output and "cron 0 3 * * *" in shown.output
    assert " 03:00:00" in shown.output
    rows = json.loads(_run("schedules", queue_name, "--json", url=redis_url).output)
    assert rows[0]["id"] == "nightly" and rows[0]["data"] == {"full": True}


def test_purge_asks_first(redis_url: str, queue_name: str, sync_queue: Queue) -> None:
    for _ in range(4):
        sync_queue.enqueue("t", None)
    refused = _run("purge", queue_name, "waiting", url=redis_url, input="n\n")
    assert refused.exit_code == 1 and "delete the 4 waiting job(s)" in refused.output
    assert sync_queue.counts()[JobState.WAITING] == 4
    done = _run("purge", queue_name, "waiting", url=redis_url, input="y\n")
    assert done.exit_code == 0 and "removed 4 waiting job(s)" in done.output
    assert sync_queue.counts()[JobState.WAITING] == 0


def test_spark_commands_take_the_shared_options() -> None:
    for name in ("archive", "report"):
        shown = CliRunner().invoke(main, [name, "--help"])
        assert shown.exit_code == 0, shown.output
        for option in ("--url", "--prefix", "--master", "--queue"):
            assert option in shown.output, (name, option)
    missing = CliRunner().invoke(main, ["report"])
    assert missing.exit_code == 2 and "give --archive, or at least one --queue" in missing.output
    no_path = CliRunner().invoke(main, ["archive", "--queue", "q"])
    assert no_path.exit_code == 2 and "--path" in no_path.output


def test_suspects_listed_released_and_failed(
    redis_url: str, queue_name: str, sync_queue: Queue, redis_client: redis.Redis
) -> None:
    for job_id in ("s1", "s2", "plain"):
        sync_queue.enqueue("t", None, id=job_id)
    for job_id in ("s1", "s2"):
        redis_client.hset(sync_queue.core.keys.job(job_id), "stalls", 1)
    rows = json.loads(_run("jobs", "list", queue_name, "--json", url=redis_url).output)
    assert {r["id"]: r["suspect"] for r in rows} == {"s1": True, "s2": True, "plain": False}
    assert "suspect" in _run("jobs", "list", queue_name, url=redis_url).output
    assert _run("release-suspect", queue_name, "s1", url=redis_url).output == "s1: released\n"
    assert not sync_queue.get("s1").suspect
    assert _run("fail-suspect", queue_name, "s2", url=redis_url).output == "s2: failed\n"
    assert sync_queue.get("s2").state is JobState.FAILED
    refused = _run("release-suspect", queue_name, "plain", url=redis_url)
    assert refused.exit_code == 1 and "not a suspect" in refused.output

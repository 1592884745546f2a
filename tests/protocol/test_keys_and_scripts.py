"""keys.py and scripts.py: one cluster slot per queue, script headers, loading."""

from __future__ import annotations

import hashlib
import re
from importlib import resources

import pytest
import redis

from conveyor.client.transport import SyncRunner
from conveyor.protocol import PROTOCOL_VERSION, flows, observe, ops, schedules
from conveyor.protocol.keys import ID_PATTERN, NAME_PATTERN, QueueKeys
from conveyor.protocol.scripts import SCRIPT_NAMES, expand, load_script
from support.servers import ServerFactory

from .harness import SCRIPTS, Proto

LUA = resources.files("conveyor.protocol") / "lua"


def crc16_xmodem(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def key_slot(key: str) -> int:
    """Redis Cluster's HASH_SLOT: CRC16 of the first non-empty {tag}, mod 16384."""
    raw = key.encode()
    start = raw.find(b"{")
    if start != -1:
        end = raw.find(b"}", start + 1)
        if end > start + 1:
            raw = raw[start + 1 : end]
    return crc16_xmodem(raw) % 16384


def all_keys(keys: QueueKeys, job_id: str) -> list[str]:
    return [
        keys.meta, keys.ready, keys.scheduled, keys.active, keys.completed, keys.failed,
        keys.blocked, keys.marker, keys.events, keys.workers, keys.worker("host-1-ab"),
        keys.job(job_id), keys.blocked_job(job_id), keys.done(job_id), keys.groups,
        keys.gwait, keys.gactive, keys.group_ready("tenant-1"), keys.group_conf("tenant-1"),
        keys.wake("host-1-ab"), keys.metrics(493_000), keys.timings(493_000), keys.totals,
        keys.job_log(job_id), keys.waiting_children, keys.outbox, keys.children(job_id),
        keys.pending(job_id), keys.processed(job_id), keys.ignored(job_id),
        keys.children_failed(job_id),
    ]  # fmt: skip


def header(name: str) -> str:
    """The leading comment block of a script file (before its first include)."""
    lines = []
    for line in (LUA / f"{name}.lua").read_text("utf-8").splitlines():
        if not line.startswith("--") or line.startswith("-- @include"):
            if lines and line.strip() == "":
                continue
            break
        lines.append(line)
    return "\n".join(lines)


def sample_call(name: str) -> ops.Call:
    keys = QueueKeys("p", "q")
    spec = ops.JobSpec(
        "id", "t", "null", 0, None, None, 3, 3, 0, 0, 0, 0, False, "", ops.UpsertRules()
    )
    return {
        "enqueue": ops.enqueue(keys, [spec], events_maxlen=10),
        "enqueue_new": ops.enqueue_new(keys, [("a", "t", "null")], events_maxlen=10),
        "enqueue_skip": ops.enqueue_skip(keys, [spec], events_maxlen=10),
        "claim": ops.claim(
            keys, worker_id="w", count=1, lease_ms=1, token="t", promote=1, events_maxlen=10
        ),
        "migrate": ops.migrate(keys, force=False, cursor=0, count=1),
        "heartbeat": ops.heartbeat(
            keys, worker_id="w", lease_ms=1, worker_ttl_ms=1, info="{}", leases=[]
        ),
        "progress": ops.progress(keys, job_id="id", token="t", value=0.5, events_maxlen=10),
        "policy": ops.policy(keys, "id", "t", [("timeout", 1)]),
        "complete": ops.complete(keys, [], events_maxlen=10),
        "fail": ops.fail(keys, [], events_maxlen=10),
        "reap": ops.reap(keys, batch=1, events_maxlen=10),
        "release": ops.release(keys, [], events_maxlen=10),
        "await": ops.await_job(keys, "id"),
        "cancel": ops.cancel(keys, "id", events_maxlen=10),
        "abort": ops.abort(keys, "id", events_maxlen=10),
        "limits": ops.limits(keys, "group", group="g", concurrency=1),
        "schedule": schedules.schedule(
            keys, "s", first_tick_ms=1, cron=None, every_ms=1000, template=spec, events_maxlen=10
        ),
        "schedule_next": schedules.schedule_next(
            keys, "s", fired_ms=1, next_ms=2, events_maxlen=10
        ),
        "unschedule": schedules.unschedule(keys, "s"),
        "promote": ops.promote(keys, "id", events_maxlen=10),
        "reprioritize": ops.reprioritize(keys, "id", 5, events_maxlen=10),
        "retry": ops.retry(keys, "id", events_maxlen=10),
        "remove": ops.remove(keys, "id", events_maxlen=10),
        "forget": ops.forget(keys, [("id", 1)]),
        "suspect": ops.suspect(keys, "id", "release", events_maxlen=10),
        "record_metrics": observe.record_metrics(
            keys, completed=1, failed=0, retried=0, stalled=0, timings={}, retention_ms=1
        ),
        "job_log": observe.job_log(keys, job_id="id", token="t", lines=["a line"]),
        "checkpoint": ops.checkpoint(keys, job_id="id", token="t", state="{}"),
        "defer": ops.defer(keys, [("id", "t", 0, "")], events_maxlen=10),
        "rate_limited": ops.rate_limited(
            keys, [("id", "t")], wait_ms=1, scope="queue", events_maxlen=10
        ),
        "flow_add": flows.flow_add(keys, [flows.FlowNodeArgs(spec, "", "", ())], events_maxlen=10),
        "flow_attach": flows.flow_attach(keys, "id", "t", ["o/c"]),
        "flow_wait": flows.flow_wait(keys, "id", "t", events_maxlen=10),
        "flow_settle": flows.flow_settle(
            keys, [flows.HandOff("1-0", "q/p", "o/c", "completed", "1", "")], events_maxlen=10
        ),
    }[name]


# --- key layout ------------------------------------------------------------------------------


def test_crc16_matches_the_cluster_spec_and_redis_py() -> None:
    assert crc16_xmodem(b"123456789") == 0x31C3  # the reference value of the cluster spec
    for key in ("conveyor:{emails}:ready", "a{b}c", "{}x", "no-tag", "x{}{y}"):
        assert key_slot(key) == redis.crc.key_slot(key.encode())


@pytest.mark.parametrize("queue", ["default", "emails", "a", "Q.1-x_y", "9" * 128])
@pytest.mark.parametrize("job_id", ["j1", "{other}", "a:b}c{d", "*?[x]", "~" * 256])
def test_every_key_of_a_queue_is_in_one_slot(queue: str, job_id: str) -> None:
    keys = QueueKeys("conveyor", queue)
    names = all_keys(keys, job_id)
    assert {key_slot(k) for k in names} == {key_slot("{" + queue + "}")}
    assert {redis.crc.key_slot(k.encode()) for k in names} == {key_slot(names[0])}
    assert all(k.startswith(f"conveyor:{{{queue}}}:") for k in names)


def test_the_key_layout() -> None:
    k = QueueKeys("cv", "q")
    assert all_keys(k, "7") == [
        "cv:{q}:meta", "cv:{q}:ready", "cv:{q}:scheduled", "cv:{q}:active", "cv:{q}:completed",
        "cv:{q}:failed", "cv:{q}:blocked", "cv:{q}:marker", "cv:{q}:events", "cv:{q}:workers",
        "cv:{q}:worker:host-1-ab", "cv:{q}:job:7", "cv:{q}:blocked:7", "cv:{q}:done:7",
        "cv:{q}:groups", "cv:{q}:gwait", "cv:{q}:gactive", "cv:{q}:gready:tenant-1",
        "cv:{q}:gconf:tenant-1", "cv:{q}:wake:host-1-ab", "cv:{q}:metrics:493000",
        "cv:{q}:timings:493000", "cv:{q}:totals", "cv:{q}:log:7", "cv:{q}:wchildren",
        "cv:{q}:outbox", "cv:{q}:children:7", "cv:{q}:pending:7", "cv:{q}:processed:7",
        "cv:{q}:ignored:7", "cv:{q}:cfailed:7",
    ]  # fmt: skip
    assert k.base == "cv:{q}:"
    assert PROTOCOL_VERSION == 4


@pytest.mark.parametrize("bad", ["", "-a", "a b", "a{b", "a}b", "a:b", "a*", "é", "x" * 129])
def test_names_cannot_carry_separators_tags_or_globs(bad: str) -> None:
    assert NAME_PATTERN.fullmatch(bad) is None


@pytest.mark.parametrize(("job_id", "ok"), [("a:{b}*", True), ("~" * 256, True),
                                            ("", False), ("a b", False), ("x" * 257, False),
                                            ("é", False), ("a\n", False)])  # fmt: skip
def test_ids_are_printable_ascii_without_spaces(job_id: str, ok: bool) -> None:
    assert (ID_PATTERN.fullmatch(job_id) is not None) is ok


def test_a_lifecycle_writes_only_keys_of_its_queue(server_factory: ServerFactory) -> None:
    client = redis.Redis.from_url(server_factory().url)  # private: nothing else writes here
    try:
        q = Proto(client, "life")
        q.enqueue("a", lifo=True)
        q.enqueue("b", delay=0.01)
        q.await_job("a")
        q.claim(2, token="t")
        q.enqueue("a", data=2)  # blocked twin
        q.progress("a", "t", 0.5)
        q.heartbeat([("a", "t")], worker="w")
        q.complete_one("a", "t")
        q.start("c", token="t2", priority=0)
        q.fail("c", "t2", permanent=True)
        q.reap()
        q.cancel("b")
        names = {k.decode() for k in client.scan_iter(count=1000)}
        assert {"cvtest:{life}:job:a", "cvtest:{life}:done:a", "cvtest:{life}:worker:w"} <= names
        assert all(k.startswith(q.keys.base) for k in names), names
        assert len({key_slot(k) for k in names}) == 1
        assert client.hget(q.keys.meta, "version") is None  # only clients write the version
    finally:
        client.close()


# --- the script files -------------------------------------------------------------------------


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_script_opens_with_a_contract_header(name: str) -> None:
    text = header(name)
    assert text.startswith(f"-- {name}: ")
    for section in ("KEYS[1]", "ARGV[1]", "Returns", "Effects", "Complexity: O("):
        assert section in text, f"{name}.lua header lacks {section!r}"


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_the_header_lists_every_key_the_builder_sends(name: str) -> None:
    text = header(name)
    documented = sorted({int(n) for n in re.findall(r"^-- KEYS\[(\d+)\]", text, re.M)})
    call = sample_call(name)
    assert call.script == name
    assert documented == list(range(1, len(call.keys) + 1))
    assert call.keys[0] == "p:{q}:"  # KEYS[1] is always the queue's base prefix
    used = {int(n) for n in re.findall(r"KEYS\[(\d+)\]", load_script(name).source)}
    assert used <= set(documented)


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_no_script_uses_the_keys_command_or_builds_a_foreign_key(name: str) -> None:
    source = load_script(name).source
    assert not re.search(r"""redis\.p?call\(\s*['"]keys['"]""", source, re.I)
    assert not re.search(r"""['"](KEYS|SCAN|FLUSHALL|FLUSHDB)['"]""", source)
    # every key not passed in KEYS is derived from the base prefix KEYS[1]
    assert "local base = KEYS[1]" in source
    literals = re.findall(r"'([a-z_]+:)'", source)
    assert literals, "derives no per-job or per-group key"
    for literal in literals:
        assert re.search(rf"base \.\. '{literal}'", source), literal


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_includes_are_expanded_and_the_sha_is_of_the_expanded_text(name: str) -> None:
    script = load_script(name)
    assert script.name == name
    assert not any(line.startswith("-- @include") for line in script.source.splitlines())
    assert "local function now_ms()" in script.source  # every script includes common
    assert script.sha == hashlib.sha1(script.source.encode("utf-8")).hexdigest()
    assert SCRIPTS[name] == script  # loading is deterministic


def test_the_expansion_test_vector_of_protocol_section_7() -> None:
    includes = {"x": "local y = 2\n"}
    source = expand("-- a\n-- @include x\nreturn 1\n", includes.__getitem__)
    assert source == "-- a\nlocal y = 2\n\nreturn 1\n"
    assert hashlib.sha1(source.encode()).hexdigest() == "2d4baf252b2743c066696ad30d661dc14d8fa8f2"
    # only LF splits lines: a form feed inside a line stays where it is
    assert expand("a\fb\n", includes.__getitem__) == "a\fb\n"


def test_an_unknown_script_name_is_refused() -> None:
    with pytest.raises(KeyError):
        load_script("keys")


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_script_loads_on_the_server_under_its_sha(
    redis_client: redis.Redis, name: str
) -> None:
    script = load_script(name)
    assert redis_client.script_load(script.source) == script.sha
    assert redis_client.script_exists(script.sha) == [True]


def test_noscript_is_answered_by_loading_and_running_again(
    server_factory: ServerFactory,
) -> None:
    server = server_factory()
    client = redis.Redis.from_url(server.url)
    try:
        runner = SyncRunner(client, SCRIPTS)
        keys = QueueKeys("cvtest", "noscript")
        assert client.script_exists(SCRIPTS["claim"].sha) == [False]
        reply = runner.run(ops.claim(keys, worker_id="w", count=1, lease_ms=10, token="t",
                                     promote=1, events_maxlen=10))  # fmt: skip
        assert int(reply[1]) == -1
        assert client.script_exists(SCRIPTS["claim"].sha) == [True]
        client.script_flush()
        calls = [ops.await_job(keys, "x"), ops.cancel(keys, "x", events_maxlen=10)]
        assert runner.run_many(calls) == [[b"missing"], 0]
    finally:
        client.close()

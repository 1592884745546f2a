"""A thin driver for the Lua scripts: every method builds one Call with
`conveyor.protocol.ops`, runs it with `SyncRunner` and decodes the reply, and
a few readers show the raw Redis state the assertions look at."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import redis

from conveyor import serializers
from conveyor.client.events import decode_entries
from conveyor.client.transport import SyncRunner
from conveyor.options import JobDefaults, build_spec
from conveyor.protocol import ops, schedules
from conveyor.protocol.keys import QueueKeys
from conveyor.protocol.record import RECORD_DEFAULTS
from conveyor.protocol.scripts import SCRIPT_NAMES, load_script

SCRIPTS = {name: load_script(name) for name in SCRIPT_NAMES}
PREFIX = "cvtest"
MAXLEN = 1000
SEQ_SPAN = 2**31  # ready score = priority * SEQ_SPAN + seq
HALF = 2**30  # FIFO seqs count up from HALF, LIFO ones down from it
DEFAULTS = JobDefaults()


def text(value: Any) -> str:
    return ops.text(value)


def with_defaults(record: dict[str, str]) -> dict[str, str]:
    """A record with the fields it leaves out at their defaults (protocol §4.1)."""
    if not record:
        return record
    full = {name: str(value) for name, value in RECORD_DEFAULTS.items()}
    full["group"] = ""
    if "created_at" in record:
        full["run_at"] = record["created_at"]
    full.update(record)
    return full


class Proto:
    """One queue of the session server and the scripts run against it."""

    def __init__(self, client: redis.Redis, queue: str) -> None:
        self.r = client
        self.name = queue
        self.keys = QueueKeys(PREFIX, queue)
        self.runner = SyncRunner(client, SCRIPTS)

    def run(self, call: ops.Call) -> Any:
        return self.runner.run(call)

    # --- producing ---------------------------------------------------------------

    def spec(self, job_id: str, task: str = "t", data: Any = None, **options: Any) -> ops.JobSpec:
        """A JobSpec with the default options; `run_at_ms=` sets an exact due time."""
        run_at_ms = options.pop("run_at_ms", None)
        spec = build_spec(
            task, data, {"id": job_id, **options}, defaults=DEFAULTS, max_payload=1 << 20
        )
        if run_at_ms is not None:
            spec = dataclasses.replace(spec, run_at_ms=run_at_ms)
        return spec

    def enqueue_specs(self, specs: Sequence[ops.JobSpec]) -> list[ops.Enqueued]:
        return ops.decode_enqueue(self.run(ops.enqueue(self.keys, specs, events_maxlen=MAXLEN)))

    def enqueue_new(self, *jobs: tuple[str, Any]) -> int:
        """The first send of (id, data) jobs with generated ids and no options."""
        new = [(job_id, "t", serializers.dumps(data)) for job_id, data in jobs]
        return int(self.run(ops.enqueue_new(self.keys, new, events_maxlen=MAXLEN)))

    def enqueue_skip(self, specs: Sequence[ops.JobSpec]) -> int:
        """Create each job unless its id exists; the number created."""
        return ops.skip_created(self.run(ops.enqueue_skip(self.keys, specs, events_maxlen=MAXLEN)))

    def enqueue(
        self, job_id: str, task: str = "t", data: Any = None, **options: Any
    ) -> ops.Enqueued:
        return self.enqueue_specs([self.spec(job_id, task, data, **options)])[0]

    # --- working -----------------------------------------------------------------

    def claim_call(
        self,
        count: int = 1,
        *,
        token: str = "tok",
        worker: str = "w1",
        lease_ms: int = 30_000,
        promote: int = 100,
        compact: bool = True,
        alone: bool = True,
        isolates: bool = False,
    ) -> ops.Call:
        return ops.claim(
            self.keys,
            worker_id=worker,
            count=count,
            lease_ms=lease_ms,
            token=token,
            promote=promote,
            events_maxlen=MAXLEN,
            compact=compact,
            alone=alone,
            isolates=isolates,
        )

    def claim(self, count: int = 1, *, compact: bool = True, **kwargs: Any) -> ops.ClaimReply:
        raw = self.run(self.claim_call(count, compact=compact, **kwargs))
        return ops.decode_claim(raw, compact=compact)

    def claimed_ids(self, count: int = 1, **kwargs: Any) -> list[str]:
        return [job.id for job in self.claim(count, **kwargs).jobs]

    def complete(self, *items: tuple[str, str, str]) -> list[bool]:
        return ops.decode_complete(self.run(ops.complete(self.keys, items, events_maxlen=MAXLEN)))

    def complete_one(self, job_id: str, token: str = "tok", result: str = '"ok"') -> bool:
        return self.complete((job_id, token, result))[0]

    def fail_items(self, *items: ops.FailItem) -> list[str]:
        return ops.decode_fail(self.run(ops.fail(self.keys, items, events_maxlen=MAXLEN)))

    def fail(
        self,
        job_id: str,
        token: str = "tok",
        error: str = "boom",
        *,
        permanent: bool = False,
        retry_delay_ms: int | None = None,
        jitter: float = 0.0,
    ) -> str:
        item = ops.FailItem(job_id, token, error, permanent, retry_delay_ms, jitter)
        return self.fail_items(item)[0]

    def release(self, *leases: tuple[str, str], started: bool = False) -> list[int]:
        given = [(job_id, token, started) for job_id, token in leases]
        return [int(x) for x in self.run(ops.release(self.keys, given, events_maxlen=MAXLEN))]

    def reap(self, batch: int = 100) -> ops.ReapReply:
        return ops.decode_reap(self.run(ops.reap(self.keys, batch=batch, events_maxlen=MAXLEN)))

    def heartbeat_raw(
        self,
        leases: Sequence[tuple[str, str]],
        *,
        worker: str = "w1",
        lease_ms: int = 30_000,
        worker_ttl_ms: int = 10_000,
        info: str = '{"pid": 1}',
    ) -> Any:
        call = ops.heartbeat(
            self.keys,
            worker_id=worker,
            lease_ms=lease_ms,
            worker_ttl_ms=worker_ttl_ms,
            info=info,
            leases=leases,
        )
        return self.run(call)

    def heartbeat(self, leases: Sequence[tuple[str, str]], **kwargs: Any) -> list[str]:
        return ops.decode_heartbeat(self.heartbeat_raw(leases, **kwargs))

    def progress(self, job_id: str, token: str, value: float) -> int:
        call = ops.progress(
            self.keys, job_id=job_id, token=token, value=value, events_maxlen=MAXLEN
        )
        return int(self.run(call))

    def await_job(self, job_id: str) -> ops.AwaitReply:
        return ops.decode_await(self.run(ops.await_job(self.keys, job_id)))

    def cancel(self, job_id: str) -> int:
        return int(self.run(ops.cancel(self.keys, job_id, events_maxlen=MAXLEN)))

    def abort(self, job_id: str) -> str:
        return text(self.run(ops.abort(self.keys, job_id, events_maxlen=MAXLEN)))

    # --- job control -------------------------------------------------------------

    def promote(self, job_id: str) -> int:
        return int(self.run(ops.promote(self.keys, job_id, events_maxlen=MAXLEN)))

    def reprioritize(self, job_id: str, priority: int) -> int:
        call = ops.reprioritize(self.keys, job_id, priority, events_maxlen=MAXLEN)
        return int(self.run(call))

    def retry(self, job_id: str) -> int:
        return int(self.run(ops.retry(self.keys, job_id, events_maxlen=MAXLEN)))

    def remove(self, job_id: str) -> str:
        return text(self.run(ops.remove(self.keys, job_id, events_maxlen=MAXLEN)))

    # --- repeatable jobs -----------------------------------------------------------

    def schedule_call(
        self,
        sid: str,
        first_tick_ms: int,
        *,
        cron: str | None = None,
        every_ms: int | None = None,
        task: str = "t",
        data: Any = None,
        **options: Any,
    ) -> ops.Call:
        """schedule.lua with a template built by `spec` (its id is unused)."""
        return schedules.schedule(
            self.keys,
            sid,
            first_tick_ms=first_tick_ms,
            cron=cron,
            every_ms=every_ms,
            template=self.spec("template", task, data, **options),
            events_maxlen=MAXLEN,
        )

    def schedule(self, sid: str, first_tick_ms: int, **kwargs: Any) -> tuple[str, str]:
        """Create or replace a schedule; its pending job's (id, state)."""
        job_id, state = self.run(self.schedule_call(sid, first_tick_ms, **kwargs))
        return text(job_id), text(state)

    def schedule_next_call(self, sid: str, fired_ms: int, next_ms: int) -> ops.Call:
        return schedules.schedule_next(
            self.keys, sid, fired_ms=fired_ms, next_ms=next_ms, events_maxlen=MAXLEN
        )

    def schedule_next(self, sid: str, fired_ms: int, next_ms: int) -> int:
        return int(self.run(self.schedule_next_call(sid, fired_ms, next_ms)))

    def unschedule(self, sid: str) -> int:
        return int(self.run(schedules.unschedule(self.keys, sid)))

    def schedule_hash(self, sid: str) -> dict[str, str]:
        return {text(k): text(v) for k, v in self.r.hgetall(self.keys.schedule(sid)).items()}

    # --- reading the raw state ----------------------------------------------------

    def now(self) -> int:
        """Redis TIME in ms: the clock the scripts use."""
        sec, usec = self.r.time()
        return int(sec) * 1000 + int(usec) // 1000

    def stored(self, job_id: str) -> dict[str, str]:
        """The fields job:<id> actually holds."""
        return {text(k): text(v) for k, v in self.r.hgetall(self.keys.job(job_id)).items()}

    def job(self, job_id: str) -> dict[str, str]:
        """job:<id> as a reader sees it: the record defaults filled in."""
        return with_defaults(self.stored(job_id))

    def twin(self, job_id: str) -> dict[str, str]:
        raw = self.r.hgetall(self.keys.blocked_job(job_id))
        return with_defaults({text(k): text(v) for k, v in raw.items()})

    def score(self, index: str, job_id: str) -> float | None:
        return self.r.zscore(index, job_id)

    def members(self, index: str) -> list[str]:
        return [text(m) for m in self.r.zrange(index, 0, -1)]

    def ttl_ms(self, key: str) -> int:
        return int(self.r.pttl(key))

    def events(self, name: str | None = None) -> list[dict[str, str]]:
        """The events stream, oldest first; `name` keeps one kind."""
        out = []
        for _, raw in self.r.xrange(self.keys.events):
            fields = {text(k): text(v) for k, v in raw.items()}
            if name is None or fields.get("event") == name:
                out.append(fields)
        return out

    def job_events(self, name: str | None = None) -> list[dict[str, str]]:
        """The events stream as a reader sees it, one dict per job (an entry naming
        several jobs, `ids` in §11, gives one each), oldest first; `name` keeps one kind."""
        return [
            {"event": e.name, "id": e.job_id, **e.fields}
            for e in decode_entries(self.r.xrange(self.keys.events))
            if name is None or e.name == name
        ]

    def marker_set(self) -> bool:
        return self.r.zscore(self.keys.marker, "0") == 0

    def clear_marker(self) -> None:
        self.r.delete(self.keys.marker)

    def snapshot(self, *job_ids: str) -> dict[str, Any]:
        """Everything a refused call must leave alone."""
        k = self.keys
        state: dict[str, Any] = {"events": self.r.xlen(k.events)}
        for index in (k.ready, k.scheduled, k.active, k.completed, k.failed, k.blocked):
            state[index] = self.r.zrange(index, 0, -1, withscores=True)
        for job_id in job_ids:
            state[job_id] = (self.job(job_id), self.twin(job_id))
        return state

    def ready_score(self, job_id: str) -> int:
        fields = self.job(job_id)
        return int(fields["priority"]) * SEQ_SPAN + int(fields["seq"])

    def start(
        self, job_id: str, token: str = "tok", *, lease_ms: int = 30_000, **options: Any
    ) -> ops.ClaimedJob:
        """Enqueue one job and claim it (it must be the first in line)."""
        self.enqueue(job_id, **options)
        jobs = self.claim(token=token, lease_ms=lease_ms).jobs
        assert [j.id for j in jobs] == [job_id]
        return jobs[0]

    def put(self, job_id: str, state: str, **options: Any) -> None:
        """Make a job in `state` (waiting, delayed, active, completed or
        failed) through the scripts; an active one is leased with token `t`."""
        if state in ("waiting", "delayed"):
            self.enqueue(job_id, **({"delay": 60} if state == "delayed" else {}), **options)
        else:
            self.start(job_id, token="t", **options)
            if state == "completed":
                assert self.complete_one(job_id, "t")
            elif state == "failed":
                assert self.fail(job_id, "t", permanent=True) == "failed"
        assert self.job(job_id)["state"] == state

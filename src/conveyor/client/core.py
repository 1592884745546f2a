"""The I/O-free heart of both clients: validation, calls, decoding (the value types
they take and return are in models.py, the keys and decoders of reading in
core_views.py, a schedule's checks and decoding in scheduling.py).

`Queue` and `AsyncQueue` hold a QueueCore and add only the line that talks
to Redis, so the two can never drift apart.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from conveyor import serializers
from conveyor.client import resp, scheduling
from conveyor.client.core_views import CoreViews
from conveyor.client.models import (
    SKIP_OPTIONS,
    Enqueued,
    IfExists,
    JobRequest,
    QueueSettings,
    ScheduleInfo,
)
from conveyor.client.replicas import ReplicaWait
from conveyor.client.scheduling import check_schedule, schedule_window
from conveyor.errors import (
    ConnectionLostError,
    EvictionPolicyError,
    GroupFullError,
    JobNotFoundError,
    NotASuspectError,
    ProtocolVersionError,
    UncertainWriteError,
    UnknownOptionError,
    UnreplicatedWriteError,
    UnsupportedServerError,
    ValidationError,
    failure_of,
)
from conveyor.hooks import Hooks
from conveyor.hooks import call as call_hooks
from conveyor.job import JobState
from conveyor.options import (
    SpecBuilder,
    check_job_id,
    check_name,
    check_priority,
)
from conveyor.protocol import ops, schedules
from conveyor.protocol.keys import FAILURE_LANE, PROTOCOL_VERSION, QueueKeys
from conveyor.protocol.scripts import SCRIPT_NAMES, Script, load_script
from conveyor.timing import check_cron, next_tick

MIN_SERVER = (6, 2, 0)


# Pauses before re-sending enqueues whose reply was lost (then the error).
RESEND_DELAYS = (0.05, 0.25, 1.0)


def carry_doubt(
    doubt: UncertainWriteError | None, failure: ConnectionLostError
) -> UncertainWriteError | None:
    """Whether an enqueue may have been applied, after one more failed send:
    a lost reply raises the doubt, and a re-send that never reached Redis
    (it could not connect) does not lift it. None: nothing was applied."""
    if isinstance(failure, UncertainWriteError):
        return failure
    if doubt is None:
        return None
    return UncertainWriteError(f"{doubt}; a re-send then could not reach Redis: {failure}")


def applied_replies(failure: ConnectionLostError, calls: int) -> list[Any] | None:
    """The replies of a first send the master applied but too few replicas
    confirmed: they, not a re-send's (a replay: `exists`), say what the
    calls did. None when the first send's outcome is unknown."""
    if not isinstance(failure, UnreplicatedWriteError) or failure.replies is None:
        return None
    replies = failure.replies
    if len(replies) != calls or any(isinstance(r, Exception) for r in replies):
        return None
    return replies


def server_ms(reply: Any) -> int:
    """Redis TIME's reply (seconds, microseconds) in ms: readers judge
    stored times by the server's clock, never their own (protocol §1)."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


def parse_version(text: str) -> tuple[int, int, int]:
    parts = [int(p) for p in text.split(".")[:3] if p.isdigit()]
    return (parts + [0, 0, 0])[0], (parts + [0, 0, 0])[1], (parts + [0, 0, 0])[2]


@functools.lru_cache(maxsize=64)
def _text(value: Any) -> str:
    """A reply word (outcome) as text; there are a handful of them."""
    return ops.text(value)


@functools.lru_cache(maxsize=64)
def _job_state(value: Any) -> JobState | None:
    """None: the record is gone (a throttled job's standing job, §16.3)."""
    text = ops.text(value)
    return JobState(text) if text else None


class QueueCore(CoreViews):
    """Everything about one queue that needs no I/O."""

    def __init__(self, name: str, settings: QueueSettings, *, failures: bool = False) -> None:
        self.name = check_name(name, "queue name")
        self.settings = settings
        self.failures = failures
        lane = FAILURE_LANE if failures else ""
        self.keys = QueueKeys(check_name(settings.prefix, "key prefix"), self.name, lane)
        self.scripts: dict[str, Script] = {n: load_script(n) for n in SCRIPT_NAMES}
        self.specs = SpecBuilder(settings.defaults, settings.max_payload)
        self.hooks = Hooks(settings.hooks)
        self.replica_wait = ReplicaWait.of(settings.min_replicas, settings.replica_timeout)
        self._new_head: bytes | None = None  # see enqueue_one

    # --- enqueue -------------------------------------------------------------

    def before_enqueue(self, task: str, data: Any, options: Mapping[str, Any]) -> dict[str, Any]:
        """The options of an enqueue after the hooks saw (and changed) them."""
        changed = dict(options)
        call_hooks(self.hooks.before_enqueue, self.name, task, data, changed)
        return changed

    def after_enqueue(
        self,
        requests: Sequence[JobRequest],
        done: Sequence[Enqueued] | None,
        error: BaseException | None,
    ) -> None:
        """Tell the hooks how the enqueue of `requests` (as before_enqueue
        left them) ended: `done` in the same order, or `error`."""
        for k, request in enumerate(requests):
            job_id = None if done is None else done[k].id
            options = dict(request.options)  # as before_enqueue left them
            call_hooks(
                self.hooks.after_enqueue, self.name, request.task, options,
                job_id=job_id, error=error,
            )  # fmt: skip

    def hooked_requests(self, jobs: Iterable[JobRequest | tuple[str, Any]]) -> list[JobRequest]:
        """The jobs of a bulk enqueue, with the options the hooks gave them."""
        return [
            JobRequest(r.task, r.data, self.before_enqueue(r.task, r.data, r.options))
            for r in _requests(jobs)
        ]

    def spec(self, task: str, data: Any, options: Mapping[str, Any]) -> ops.JobSpec:
        return self.specs.one(task, data, options)

    def enqueue_one(
        self, task: str, data: Any, options: Mapping[str, Any]
    ) -> tuple[str, ops.Call, bytes | None]:
        """The id and the call of one job, and for a plain job (no options:
        no JobSpec built) that enqueue_new call packed: only its tail is
        packed per call (client/resp.py)."""
        new = None if options else self.specs.plain(task, data)
        if new is None:
            spec = self.spec(task, data, options)
            return spec.id, self.enqueue_call([spec]), None
        call = ops.enqueue_new(self.keys, [new], events_maxlen=self.settings.events_maxlen)
        if self._new_head is None:
            sha, maxlen = self.scripts["enqueue_new"].sha, self.settings.events_maxlen
            head: tuple[str | int, ...] = ("EVALSHA", sha, len(call.keys), *call.keys, maxlen)
            self._new_head = resp.pack_head(head, tail=ops.NEW_ARITY)
        return new[0], call, self._new_head + resp.pack_tail(new)

    def enqueued_one(self, job_id: str, reply: Any) -> Enqueued:
        if reply == 1:  # enqueue_new's, the common case, without building lists
            return Enqueued(job_id, self.name, "created", JobState.WAITING)
        return _refusing(self._enqueued([job_id], reply))[0]

    def enqueue_call(self, specs: Sequence[ops.JobSpec]) -> ops.Call:
        """enqueue_new when every job is new and plain (a generated id, no
        options, no index), else enqueue."""
        maxlen = self.settings.events_maxlen
        # options() is empty only for a generated id at the protocol's defaults
        if specs and all(not s.index and s.options() == "" for s in specs):
            new = [(s.id, s.task, s.data) for s in specs]
            return ops.enqueue_new(self.keys, new, events_maxlen=maxlen)
        return ops.enqueue(self.keys, specs, events_maxlen=maxlen)

    def resend_call(self, call: ops.Call) -> ops.Call:
        """The call to send again after its reply was lost: an enqueue_new
        call goes through enqueue (its jobs that got in are `exists`)."""
        return ops.resend_of_new(self.keys, call) if call.script == "enqueue_new" else call

    def enqueue_many_calls(
        self,
        jobs: Iterable[JobRequest | tuple[str, Any]],
        chunk_size: int,
        if_exists: IfExists = "update",
    ) -> tuple[list[ops.Call], list[Sequence[str]]]:
        """The calls of a bulk enqueue, `chunk_size` jobs each, and each
        call's job ids. Every job is validated first: a bad one writes
        nothing. Jobs that are all plain go as enqueue_new calls built
        straight from their ids, tasks and data: no JobSpec or tuple per job
        for the garbage collector to walk.
        With if_exists="skip" every call is an enqueue_skip call."""
        if type(chunk_size) is not int or chunk_size < 1:
            raise ValidationError(f"chunk_size must be a positive int, got {chunk_size!r}")
        if if_exists not in ("update", "skip"):
            raise ValidationError(f"if_exists must be 'update' or 'skip', got {if_exists!r}")
        requests = _requests(jobs)
        if if_exists == "skip":
            return self._skip_calls(requests, chunk_size)
        flat = None
        if not any(r.options for r in requests):
            flat = self.specs.plain_many([r.task for r in requests], [r.data for r in requests])
        if flat is None:
            specs = self.specs.many([(r.task, r.data, r.options) for r in requests])
            chunks = [specs[i : i + chunk_size] for i in range(0, len(specs), chunk_size)]
            return [self.enqueue_call(c) for c in chunks], [[s.id for s in c] for c in chunks]
        step, maxlen = ops.NEW_ARITY * chunk_size, self.settings.events_maxlen
        starts = range(0, len(flat), step)
        calls = [
            ops.enqueue_new_flat(self.keys, flat[i : i + step], events_maxlen=maxlen)
            for i in starts
        ]
        return calls, [flat[i : i + step : ops.NEW_ARITY] for i in starts]

    def _skip_calls(
        self, requests: Sequence[JobRequest], chunk_size: int
    ) -> tuple[list[ops.Call], list[Sequence[str]]]:
        """enqueue_skip calls of `chunk_size` jobs each. A job with an option
        enqueue_skip does not take is refused before anything is built."""
        for k, request in enumerate(requests):
            refused = set(request.options) - SKIP_OPTIONS
            if refused:
                raise UnknownOptionError(
                    f"job {k} ({request.task!r}): options if_exists='skip' cannot take: "
                    f"{sorted(refused)}; it takes {sorted(SKIP_OPTIONS)}"
                )
        specs = self.specs.many([(r.task, r.data, r.options) for r in requests])
        maxlen = self.settings.events_maxlen
        chunks = [specs[i : i + chunk_size] for i in range(0, len(specs), chunk_size)]
        calls = [ops.enqueue_skip(self.keys, c, events_maxlen=maxlen) for c in chunks]
        return calls, [[s.id for s in c] for c in chunks]

    def enqueued_many(
        self, ids: list[Sequence[str]], replies: list[Any], if_exists: IfExists = "update"
    ) -> list[Enqueued]:
        """What each call of enqueue_many_calls did, job by job."""
        if if_exists == "skip":
            name = self.name
            return [
                Enqueued(job_id, name, e.outcome, _job_state(e.state))
                for i, r in zip(ids, replies, strict=True)
                for job_id, e in zip(i, ops.decode_enqueue_skip(r, len(i)), strict=True)
            ]
        return _refusing(
            [e for i, r in zip(ids, replies, strict=True) for e in self._enqueued(i, r)]
        )

    def _enqueued(self, ids: Sequence[str], reply: Any) -> list[Enqueued]:
        """What an enqueue call did to each job: enqueue_new replies with the
        number of jobs (all created), enqueue with an outcome and a state each."""
        name = self.name
        if isinstance(reply, int):
            if reply != len(ids):
                raise ValueError(f"enqueue_new replied {reply} for {len(ids)} jobs")
            return [Enqueued(job_id, name, "created", JobState.WAITING) for job_id in ids]
        n = 2 * len(ids)
        if len(reply) < n or (len(reply) - n) % 2:
            raise ValueError(f"enqueue replied {len(reply)} items for {len(ids)} jobs")
        if len(reply) > n:  # deduplicated jobs: the id of the job that stands (§16.3)
            ids = list(ids)
            for k in range(n, len(reply), 2):
                ids[int(reply[k]) - 1] = ops.text(reply[k + 1])
        return [
            Enqueued(job_id, name, _text(reply[2 * k]), _job_state(reply[2 * k + 1]))
            for k, job_id in enumerate(ids)
        ]

    def schedule_call(
        self,
        schedule_id: str,
        task: str,
        data: Any,
        *,
        cron: str | None,
        every: float | timedelta | None,
        options: Mapping[str, Any],
        after_ms: int | None = None,
        tz: str | None = None,
        start: datetime | float | None = None,
        end: datetime | float | None = None,
        max_runs: int | None = None,
    ) -> ops.Call:
        """Validate a schedule and build its call; the first tick is the next
        cron time (in `tz`), or one interval, after now and not before
        `start` (or after `after_ms`: a retry when that tick was taken)."""
        every_ms = check_schedule(schedule_id, cron, every, options)
        template = self.spec(task, data, options)
        now_ms = round(time.time() * 1000)
        if after_ms is not None:
            now_ms = after_ms
        window = schedule_window(tz, start, end, max_runs, cron)
        first = next_tick(
            cron=None if cron is None else check_cron(cron),
            every_ms=every_ms,
            fired_ms=now_ms,
            now_ms=now_ms,
            tz=tz,
            not_before_ms=window[1],
        )
        if window[2] is not None and first > window[2]:
            raise ValidationError("the schedule has no tick before its end")
        return schedules.schedule(
            self.keys,
            schedule_id,
            first_tick_ms=first,
            cron=cron,
            every_ms=every_ms,
            template=template,
            events_maxlen=self.settings.events_maxlen,
            tz=tz,
            start_ms=window[1],
            end_ms=window[2],
            limit=max_runs,
        )

    def schedule_info(
        self, schedule_id: str, raw: Mapping[Any, Any], *, count: int = 5
    ) -> ScheduleInfo:
        """A schedule read from its hash, with its next `count` fire times."""
        return scheduling.schedule_info(schedule_id, raw, count=count)

    def control_call(self, what: str, job_id: str, priority: int | str | None = None) -> ops.Call:
        """promote / reprioritize / retry / remove one job (see their scripts)."""
        job_id = check_job_id(job_id)
        maxlen = self.settings.events_maxlen
        if what == "reprioritize":
            return ops.reprioritize(
                self.keys, job_id, check_priority(priority), events_maxlen=maxlen
            )
        build = {"promote": ops.promote, "retry": ops.retry, "remove": ops.remove}[what]
        return build(self.keys, job_id, events_maxlen=maxlen)

    def retention_fields(
        self, completed: int | None, failed: int | None
    ) -> tuple[dict[str, int], list[str]]:
        """meta fields to set and to delete for keep-by-count retention."""
        values = {"keep_completed": completed, "keep_failed": failed}
        for name, value in values.items():
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise ValidationError(f"{name} must be an integer >= 0 or None, got {value!r}")
        return (
            {k: v for k, v in values.items() if v is not None},
            [k for k, v in values.items() if v is None],
        )

    def cancel_call(self, job_id: str) -> ops.Call:
        return ops.cancel(
            self.keys, check_job_id(job_id), events_maxlen=self.settings.events_maxlen
        )

    def abort_call(self, job_id: str) -> ops.Call:
        return ops.abort(self.keys, check_job_id(job_id), events_maxlen=self.settings.events_maxlen)

    def suspect_call(self, job_id: str, action: str) -> ops.Call:
        """`release` or `fail` a suspect (suspect.lua)."""
        return ops.suspect(
            self.keys, check_job_id(job_id), action, events_maxlen=self.settings.events_maxlen
        )

    @staticmethod
    def suspect_outcome(job_id: str, reply: Any) -> str:
        """suspect.lua's (or, for a running suspect, abort.lua's) reply, or its error."""
        outcome = ops.text(reply)
        if outcome == "missing":
            raise JobNotFoundError(job_id)
        if outcome in ("not_suspect", "finished", "refused"):
            raise NotASuspectError(
                f"job {job_id!r} is not a suspect: it never stalled, was released, or has ended"
            )
        return outcome

    def await_call(self, job_id: str) -> ops.Call:
        return ops.await_job(self.keys, check_job_id(job_id))

    # --- limits and groups ---------------------------------------------------

    def limits_call(
        self,
        what: str,
        *,
        group: str = "",
        concurrency: int | None = None,
        rate: int | None = None,
        per: float = 1.0,
        max_waiting: int | None = None,
    ) -> ops.Call:
        """Validate and build a limits call (see limits.lua)."""
        if group:
            check_name(group, "concurrency key" if what == "key" else "group key")
        limits = (("concurrency", concurrency), ("rate", rate), ("max_waiting", max_waiting))
        for name, value in limits:
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ValidationError(f"{name} must be an integer >= 1 or None, got {value!r}")
        if isinstance(per, bool) or not isinstance(per, int | float) or not 0.001 <= per <= 86_400:
            raise ValidationError(f"per must be a number of seconds in [0.001, 86400]: {per!r}")
        return ops.limits(
            self.keys,
            what,
            group=group,
            concurrency=concurrency,
            rate=rate,
            window_ms=None if rate is None else round(per * 1000),
            max_waiting=max_waiting,
        )

    # --- waiting for an outcome ------------------------------------------------

    def outcome(self, job_id: str, reply: ops.AwaitReply) -> Any:
        """The result of a finished job, or the matching error."""
        if reply.state == "missing":
            raise JobNotFoundError(f"no job {job_id!r} in queue {self.name!r}")
        if reply.state == "failed":
            raise failure_of(job_id, reply.payload or "")
        return serializers.loads(reply.payload or "null")

    # --- server checks ---------------------------------------------------------

    def check_server(self, version: str, policy: str | None) -> list[str]:
        """Raise on an unusable server; return warnings to log."""
        if parse_version(version) < MIN_SERVER:
            raise UnsupportedServerError(f"Redis {version} is too old: Conveyor needs 6.2+")
        warnings = []
        if policy is not None and policy != "noeviction":
            message = (
                f"maxmemory-policy is {policy!r}: Redis may evict queued jobs. "
                "Set it to 'noeviction' (or QueueSettings(eviction_check='warn'))."
            )
            if self.settings.eviction_check == "error":
                raise EvictionPolicyError(message)
            if self.settings.eviction_check == "warn":
                warnings.append(message)
        return warnings

    def check_protocol(self, stored: Any) -> None:
        found = ops.text(stored)
        if found == str(PROTOCOL_VERSION):
            return
        said = f"queue {self.name!r} uses protocol version {found}; "
        said += f"this Conveyor speaks {PROTOCOL_VERSION}"
        if found.isdigit() and int(found) > PROTOCOL_VERSION:
            todo = f"upgrade this client to a release that speaks version {found}"
        else:
            todo = (
                f"stop the workers of version {found}, then run `conveyor migrate {self.name}` "
                f"(upgrades from version {PROTOCOL_VERSION - 1}), or drain the queue with them"
            )
        raise ProtocolVersionError(f"{said}: {todo} (docs/deployment/upgrading.md)", found=found)


def _refusing(results: list[Enqueued]) -> list[Enqueued]:
    """The results, unless a job was refused (its group at max_waiting, §16.5):
    then GroupFullError, carrying every job's result."""
    refused = [e.id for e in results if e.outcome == "refused"]
    if refused:
        raise GroupFullError(refused, results)
    return results


def _requests(jobs: Iterable[JobRequest | tuple[str, Any]]) -> list[JobRequest]:
    requests = []
    for job in jobs:
        if isinstance(job, tuple):
            job = JobRequest(*job)
        if not isinstance(job, JobRequest):
            raise ValidationError(f"expected a JobRequest or (task, data), got {job!r}")
        requests.append(job)
    return requests

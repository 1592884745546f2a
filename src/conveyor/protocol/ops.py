"""Pure operations: build each script's KEYS/ARGV and decode its reply.

Nearly every operation is "build a Call, run one script, decode the reply";
keeping the first and last step here lets the sync and async clients share
everything but the line that does I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from conveyor.protocol.keys import QueueKeys
from conveyor.protocol.record import RECORD_DEFAULTS

Arg = str | int | float | bytes

# Fields per job in the enqueue script's ARGV (see enqueue.lua).
ENQUEUE_ARITY = 6
NEW_ARITY = 3  # enqueue_new's ARGV entries per job: id, task, data
# One job of an enqueue_new call: (id, task, data).
NewJob = tuple[str, str, str]
SKIP_ARITY = 4  # enqueue_skip's ARGV entries per job: id, task, data, opts
# Fields per job in the claim script's full reply (see claim.lua).
CLAIM_ARITY = 17
# The compact claim reply (claim.lua, ARGV[8] = 1): per job id, task, data,
# attempts, created_at and `present`, then the optional fields whose bit is
# set in `present`, lowest bit first; one left out is its record default (the
# counts and limits) or nil (schedule ... expires_at).
COMPACT_FIXED = 6
# By bit of `present`: that field's place in the full reply (failures ... priority,
# then schedule, headers, checkpoint, expires_at; created_at, 12, is always there).
_OPTIONAL_AT = (4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16)
# failures ... priority when left out (written out: ClaimedJob(*...) then type-checks)
_COUNT_DEFAULTS = (
    RECORD_DEFAULTS["failures"], RECORD_DEFAULTS["stalls"], RECORD_DEFAULTS["max_failures"],
    RECORD_DEFAULTS["max_stalls"], RECORD_DEFAULTS["min_backoff"], RECORD_DEFAULTS["max_backoff"],
    RECORD_DEFAULTS["timeout"], RECORD_DEFAULTS["priority"],
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Call:
    """One script invocation: which script, its KEYS and its ARGV."""

    script: str
    keys: tuple[str, ...]
    args: tuple[Arg, ...]


@dataclass(frozen=True, slots=True)
class UpsertRules:
    """What an enqueue of an id that is already waiting (or blocked) changes."""

    data: bool = True
    run_at: str = "1"  # "1" | "0" | "later" | "earlier"
    max_failures: bool = False
    max_stalls: bool = False
    min_backoff: bool = False
    max_backoff: bool = False
    reset_counts: bool = True

    def options(self) -> list[str]:
        """The rules as enqueue.lua's `opts` lines (all of them: they are rare)."""
        return [
            f"u_data={_flag(self.data)}", f"u_run_at={self.run_at}",
            f"u_max_failures={_flag(self.max_failures)}",
            f"u_max_stalls={_flag(self.max_stalls)}",
            f"u_min_backoff={_flag(self.min_backoff)}",
            f"u_max_backoff={_flag(self.max_backoff)}", f"u_reset={_flag(self.reset_counts)}",
        ]  # fmt: skip


_DEFAULT_RULES = UpsertRules()
_DEFAULT_OPTIONS = tuple(
    RECORD_DEFAULTS[name]
    for name in ("priority", "max_failures", "max_stalls", "min_backoff", "max_backoff",
                 "timeout", "result_ttl")
)  # fmt: skip


# Not frozen: one is built per enqueued job, and a frozen dataclass's
# __init__ costs about 2 µs more per job (a fifth of a bulk enqueue's Python
# time). Treat it as immutable all the same.
@dataclass(slots=True)
class JobSpec:
    """One job to enqueue, validated and encoded (times in ms)."""

    id: str
    task: str
    data: str
    priority: int
    delay_ms: int | None
    run_at_ms: int | None
    max_failures: int
    max_stalls: int
    min_backoff_ms: int
    max_backoff_ms: int
    timeout_ms: int
    result_ttl_ms: int
    lifo: bool
    group: str
    rules: UpsertRules
    # random per enqueue call: a re-send of an applied call is recognised by it
    request: str = ""
    # property index entries: (field, value) pairs the job is findable by
    index: tuple[tuple[str, str], ...] = ()

    # the caller chose the id (else it is a fresh random one: no stale entry)
    given_id: bool = True
    # headers that travel with the job (trace context): compact JSON text, or ''
    headers: str = ""
    # opts lines of the version 4 job semantics (expire_in, dedup ...), rare
    extra: tuple[str, ...] = ()

    def argv(self) -> tuple[Arg, ...]:
        index = "\n".join(f"{field}:{value}" for field, value in self.index) if self.index else ""
        return self.id, self.task, self.data, self.request, index, self.options()

    def record_options(self) -> str | None:
        """enqueue_skip's `opts` (the record options that differ from their
        defaults), or None when the job needs enqueue: a delay, run_at, LIFO,
        group, headers, index entries or a version 4 option."""
        if (
            self.index or self.extra or self.headers or self.lifo or self.group
            or self.delay_ms is not None or self.run_at_ms is not None
        ):  # fmt: skip
            return None
        return "\n".join(self._record_option_lines())

    def _record_option_lines(self) -> list[str]:
        """`name=value` for each record option that differs from its default."""
        d = RECORD_DEFAULTS
        return [
            f"{name}={value}"
            for name, value in (
                ("priority", self.priority),
                ("max_failures", self.max_failures),
                ("max_stalls", self.max_stalls),
                ("min_backoff", self.min_backoff_ms),
                ("max_backoff", self.max_backoff_ms),
                ("timeout", self.timeout_ms),
                ("result_ttl", self.result_ttl_ms),
            )
            if value != d[name]
        ]

    def options(self) -> str:
        """What differs from the defaults, as enqueue.lua's `opts` lines."""
        if (
            not self.given_id
            and not self.extra
            and self.delay_ms is None
            and self.run_at_ms is None
            and not self.lifo
            and not self.group
            and not self.headers
            and (self.rules is _DEFAULT_RULES or self.rules == _DEFAULT_RULES)
            and (
                self.priority, self.max_failures, self.max_stalls, self.min_backoff_ms,
                self.max_backoff_ms, self.timeout_ms, self.result_ttl_ms,
            ) == _DEFAULT_OPTIONS
        ):  # fmt: skip
            return ""  # the common case, decided in one pass
        opts = self._record_option_lines()
        if self.delay_ms is not None:
            opts.append(f"delay={self.delay_ms}")
        if self.run_at_ms is not None:
            opts.append(f"run_at={self.run_at_ms}")
        if self.lifo:
            opts.append("lifo=1")
        if self.group:
            opts.append(f"group={self.group}")
        if self.headers:
            opts.append(f"headers={self.headers}")
        if self.rules != _DEFAULT_RULES:
            opts.extend(self.rules.options())
        if self.given_id:
            opts.append("given=1")
        opts.extend(self.extra)
        return "\n".join(opts)


@dataclass(frozen=True, slots=True)
class Enqueued:
    outcome: str  # created | updated | blocked | exists
    state: str


_CREATED = Enqueued("created", "waiting")


@dataclass(slots=True)  # not frozen: a frozen dataclass costs ~2 µs more per claimed job
class ClaimedJob:
    """A leased job as the claim script returned it; fields may be None when
    the record in Redis is corrupt, and the worker then fails the job."""

    id: str
    task: str | None
    data: bytes | None
    attempts: int
    failures: int | None
    stalls: int | None
    max_failures: int | None
    max_stalls: int | None
    min_backoff_ms: int | None
    max_backoff_ms: int | None
    timeout_ms: int | None
    priority: int | None
    created_at_ms: int | None
    schedule: str | None = None  # the schedule id of a repeatable job's tick
    headers: str | None = None  # JSON text of the headers given at enqueue
    checkpoint: bytes | None = None  # the saved resumable state (JSON), §16.7
    expires_at_ms: int | None = None  # claimed at or past it: fail it unrun, §16.2


@dataclass(frozen=True, slots=True)
class ClaimReply:
    now_ms: int
    next_due_ms: int | None
    jobs: list[ClaimedJob]
    held: bool = False  # a suspect waits for a worker that runs nothing else


@dataclass(frozen=True, slots=True)
class FailItem:
    id: str
    token: str
    error: str
    permanent: bool
    retry_delay_ms: int | None
    jitter: float


@dataclass(frozen=True, slots=True)
class ReapReply:
    recovered: int
    failed: int
    next_deadline_ms: int | None
    more: bool = False  # a bound was hit and work is left: reap again


@dataclass(frozen=True, slots=True)
class AwaitReply:
    state: str  # missing | pending | completed | failed
    payload: str | None


def _flag(value: bool) -> int:
    return 1 if value else 0


def text(value: Any) -> str:
    """A reply element as text (replies arrive as bytes)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _int(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return str(value).encode()


def _optional_ms(value: Any) -> int | None:
    ms = int(value)
    return None if ms < 0 else ms


def enqueue(keys: QueueKeys, specs: Sequence[JobSpec], *, events_maxlen: int) -> Call:
    args: list[Arg] = [events_maxlen, ENQUEUE_ARITY]
    for spec in specs:
        args.extend(spec.argv())
    return Call("enqueue", _enqueue_keys(keys), tuple(args))


def enqueue_new(keys: QueueKeys, jobs: Sequence[NewJob], *, events_maxlen: int) -> Call:
    """The first send of jobs with fresh generated ids, no options and no
    index entries (enqueue_new.lua). A re-send of it is `resend_of_new`."""
    # written out, not through enqueue_new_flat: each single enqueue builds
    # one (1.1 µs against 1.7 through the extra call)
    args: list[Arg] = [events_maxlen]
    for job in jobs:
        args.extend(job)
    return Call("enqueue_new", _enqueue_new_keys(keys), tuple(args))


def enqueue_new_flat(keys: QueueKeys, flat: Sequence[Arg], *, events_maxlen: int) -> Call:
    """enqueue_new of jobs given flat: id, task, data, id, task, data, ..."""
    return Call("enqueue_new", _enqueue_new_keys(keys), (events_maxlen, *flat))


def resend_of_new(keys: QueueKeys, call: Call) -> Call:
    """The enqueue call that re-sends an enqueue_new call whose reply was
    lost: the jobs that got in are reported `exists`, the others created."""
    args: list[Arg] = [call.args[0], ENQUEUE_ARITY]
    for i in range(1, len(call.args), NEW_ARITY):
        job_id, task, data = call.args[i : i + NEW_ARITY]
        args.extend((job_id, task, data, "", "", ""))
    return Call("enqueue", _enqueue_keys(keys), tuple(args))


def enqueue_skip(keys: QueueKeys, specs: Sequence[JobSpec], *, events_maxlen: int) -> Call:
    """Create each job unless its id exists (enqueue_skip.lua); every spec
    must have `record_options()`. The reply: the number created, then the
    position and state of each job that was not (`decode_enqueue_skip`)."""
    args: list[Arg] = [events_maxlen]
    for spec in specs:
        opts = spec.record_options()
        if opts is None:
            raise ValueError(f"job {spec.id!r} has options enqueue_skip does not take")
        args.extend((spec.id, spec.task, spec.data, opts))
    return Call("enqueue_skip", enqueue_skip_keys(keys), tuple(args))


def skip_created(reply: Sequence[Any]) -> int:
    """The number of jobs an enqueue_skip call created."""
    return int(reply[0])


def decode_enqueue_skip(reply: Sequence[Any], jobs: int) -> list[Enqueued]:
    """Per job of an enqueue_skip call of `jobs` jobs: created (state waiting), or
    exists with the state of the job that stands for its id ('' if its record has none)."""
    out = [_CREATED] * jobs
    if len(reply) % 2 != 1 or (len(reply) - 1) // 2 + int(reply[0]) != jobs:
        raise ValueError(f"enqueue_skip replied {len(reply)} items for {jobs} jobs")
    for k in range(1, len(reply), 2):
        out[int(reply[k]) - 1] = Enqueued("exists", text(reply[k + 1]))
    return out


@functools.lru_cache(maxsize=256)
def enqueue_skip_keys(keys: QueueKeys) -> tuple[str, ...]:
    return (keys.base, keys.meta, keys.ready, keys.marker, keys.events, keys.completed,
            keys.failed)  # fmt: skip


@functools.lru_cache(maxsize=256)
def _enqueue_new_keys(keys: QueueKeys) -> tuple[str, ...]:
    return (keys.base, keys.meta, keys.ready, keys.marker, keys.events)


@functools.lru_cache(maxsize=256)
def _enqueue_keys(keys: QueueKeys) -> tuple[str, ...]:
    """Built once per queue: every single enqueue sends them."""
    return (
        keys.base, keys.meta, keys.ready, keys.scheduled, keys.marker, keys.events,
        keys.blocked, keys.completed, keys.failed,
    )  # fmt: skip


def decode_enqueue(reply: Sequence[Any]) -> list[Enqueued]:
    return [Enqueued(text(reply[i]), text(reply[i + 1])) for i in range(0, len(reply), 2)]


def claim(
    keys: QueueKeys,
    *,
    worker_id: str,
    count: int,
    lease_ms: int,
    token: str,
    promote: int,
    events_maxlen: int,
    alone: bool = True,
    compact: bool = True,
) -> Call:
    """`alone`: the worker runs nothing now, so it may take a suspect (claim.lua).
    `compact`: ask for the compact reply; False sends the ARGV of a client
    that predates it and gets the full reply (decode either with the same
    `compact` given to decode_claim)."""
    args: tuple[Arg, ...] = (worker_id, count, lease_ms, token, promote, events_maxlen,
                             _flag(alone))  # fmt: skip
    return Call(
        "claim",
        (keys.base, keys.meta, keys.ready, keys.scheduled, keys.active, keys.marker,
         keys.events, keys.failed, keys.groups, keys.gwait, keys.gactive),
        (*args, 1) if compact else args,
    )  # fmt: skip


def decode_claim(reply: Sequence[Any], *, compact: bool = True) -> ClaimReply:
    """A claim's reply, compact or (`compact` False) full: the same jobs either way."""
    if compact:
        jobs = _compact_jobs(reply)
    else:
        jobs = [_claimed_any(reply[i : i + CLAIM_ARITY]) for i in range(3, len(reply), CLAIM_ARITY)]
    return ClaimReply(int(reply[0]), _optional_ms(reply[1]), jobs, int(reply[2]) == 1)


def _compact_jobs(reply: Sequence[Any]) -> list[ClaimedJob]:
    jobs = []
    i, end = 3, len(reply)
    while i < end:
        fixed = reply[i : i + COMPACT_FIXED]
        i += COMPACT_FIXED
        id_, task, data, attempts, created, bits = fixed
        if bits == 0 and type(data) is bytes:  # no option off its default: most jobs
            try:  # _compact_fast's decoding, written out for them
                jobs.append(ClaimedJob(id_.decode("utf-8", "replace"),
                                       task.decode("utf-8", "replace"), data, int(attempts),
                                       *_COUNT_DEFAULTS, int(created)))  # fmt: skip
                continue
            except (AttributeError, TypeError, ValueError):  # an odd field: below
                pass
        bits = int(bits)
        if bits >> len(_OPTIONAL_AT):
            raise ValueError(f"claim reply: unknown fields present ({bits})")
        n = bits.bit_count()
        present = reply[i : i + n]
        if len(present) < n:
            raise ValueError("claim reply: cut short")
        i += n
        try:
            job = _compact_fast(fixed, bits, present)
        except (AttributeError, TypeError, ValueError):  # an odd field: decoded one by one
            job = _claimed(_full_form(fixed, bits, present))
        jobs.append(job)
    return jobs


def _compact_fast(fixed: Sequence[Any], bits: int, present: Sequence[Any]) -> ClaimedJob:
    """A job of the compact reply whose fields are what claim.lua writes,
    decoded as _claimed_fast decodes the same job's full reply; raises on
    anything else, and _claimed then decodes it field by field."""
    id_, task, data, attempts, created, _ = fixed
    if data is not None and type(data) is not bytes:
        raise TypeError("data")
    d = _COUNT_DEFAULTS
    take = iter(present).__next__  # the fields present, in ClaimedJob's order
    return ClaimedJob(
        id_.decode("utf-8", "replace"),
        None if task is None else task.decode("utf-8", "replace"),
        data,
        int(attempts),
        int(take()) if bits & 1 else d[0],
        int(take()) if bits & 2 else d[1],
        int(take()) if bits & 4 else d[2],
        int(take()) if bits & 8 else d[3],
        int(take()) if bits & 16 else d[4],
        int(take()) if bits & 32 else d[5],
        int(take()) if bits & 64 else d[6],
        int(take()) if bits & 128 else d[7],
        None if created is None else int(created),
        take().decode("utf-8", "replace") if bits & 256 else None,
        take().decode("utf-8", "replace") if bits & 512 else None,
        _bytes_only(take()) if bits & 1024 else None,
        int(take()) if bits & 2048 else None,
    )


def _full_form(fixed: Sequence[Any], bits: int, present: Sequence[Any]) -> list[Any]:
    """A job of the compact reply as the full reply's 17 fields (a default as a number)."""
    id_, task, data, attempts, created, _ = fixed
    f = [id_, task, data, attempts, *_COUNT_DEFAULTS, created, None, None, None, None]
    for value in present:
        low = bits & -bits
        f[_OPTIONAL_AT[low.bit_length() - 1]] = value
        bits ^= low
    return f


def _claimed_any(f: Sequence[Any]) -> ClaimedJob:
    try:
        return _claimed_fast(f)
    except (AttributeError, TypeError, ValueError):  # an odd field: decoded one by one
        return _claimed(f)


def _claimed_fast(f: Sequence[Any]) -> ClaimedJob:
    """A claimed job whose fields are what claim.lua writes (bytes or nil): the
    same as _claimed's, in one call per job; raises on anything else (a
    ValueError if there are not CLAIM_ARITY), and _claimed then decodes it
    field by field."""
    (id_, task, data, attempts, failures, stalls, max_f, max_s, min_b, max_b, timeout, prio,
     created, sched, heads, cp, exp) = f  # fmt: skip
    if data is not None and type(data) is not bytes:
        raise TypeError("data")
    return ClaimedJob(
        id_.decode("utf-8", "replace"),
        None if task is None else task.decode("utf-8", "replace"),
        data,
        int(attempts),
        None if failures is None else int(failures),
        None if stalls is None else int(stalls),
        None if max_f is None else int(max_f),
        None if max_s is None else int(max_s),
        None if min_b is None else int(min_b),
        None if max_b is None else int(max_b),
        None if timeout is None else int(timeout),
        None if prio is None else int(prio),
        None if created is None else int(created),
        None if sched is None else sched.decode("utf-8", "replace"),
        None if heads is None else heads.decode("utf-8", "replace"),
        None if cp is None else _bytes_only(cp),
        None if exp is None else int(exp),
    )


def _bytes_only(value: bytes) -> bytes:
    if type(value) is not bytes:
        raise TypeError("not bytes")
    return value


def _claimed(f: Sequence[Any]) -> ClaimedJob:
    return ClaimedJob(
        id=text(f[0]),
        task=None if f[1] is None else text(f[1]),
        data=f[2] if f[2] is None or isinstance(f[2], bytes) else str(f[2]).encode(),
        attempts=int(f[3]),
        failures=_int(f[4]),
        stalls=_int(f[5]),
        max_failures=_int(f[6]),
        max_stalls=_int(f[7]),
        min_backoff_ms=_int(f[8]),
        max_backoff_ms=_int(f[9]),
        timeout_ms=_int(f[10]),
        priority=_int(f[11]),
        created_at_ms=_int(f[12]),
        schedule=None if f[13] is None else text(f[13]),
        headers=None if f[14] is None else text(f[14]),
        checkpoint=_bytes(f[15]),
        expires_at_ms=_int(f[16]),
    )


def complete(keys: QueueKeys, items: Sequence[tuple[str, str, str]], *, events_maxlen: int) -> Call:
    args: list[Arg] = [events_maxlen]
    for job_id, token, result in items:
        args.extend((job_id, token, result))
    return Call(
        "complete",
        (keys.base, keys.active, keys.completed, keys.ready, keys.scheduled, keys.marker,
         keys.events, keys.blocked),
        tuple(args),
    )  # fmt: skip


def decode_complete(reply: Sequence[Any]) -> list[bool]:
    """Per job: completed (1, or 2 when its flow hand-off went to the outbox)."""
    return [int(x) >= 1 for x in reply]


def handed_off(reply: Sequence[Any]) -> bool:
    """Whether a complete call left a flow hand-off in the outbox (a 2)."""
    return any(int(x) == 2 for x in reply)


def fail(keys: QueueKeys, items: Sequence[FailItem], *, events_maxlen: int) -> Call:
    args: list[Arg] = [events_maxlen]
    for it in items:
        delay = "" if it.retry_delay_ms is None else max(0, it.retry_delay_ms)
        args.extend((it.id, it.token, it.error, _flag(it.permanent), delay, it.jitter))
    return Call(
        "fail",
        (keys.base, keys.active, keys.failed, keys.ready, keys.scheduled, keys.marker,
         keys.events, keys.blocked),
        tuple(args),
    )  # fmt: skip


def policy(keys: QueueKeys, job_id: str, token: str, options: Sequence[tuple[str, int]]) -> Call:
    """Give a claimed job its task's options where it has none (policy.lua);
    `options`: (name, value) pairs, times in ms."""
    args: list[Arg] = [job_id, token]
    for name, value in options:
        args.extend((name, value))
    return Call("policy", (keys.base,), tuple(args))


def decode_policy(reply: Sequence[Any]) -> int | None:
    """The timeout (ms) in force; None when the lease is lost."""
    status = text(reply[0])
    if status == "bad":
        raise ValueError("policy.lua refused an option name or value")
    return int(reply[1]) if status == "ok" else None


def decode_fail(reply: Sequence[Any]) -> list[str]:
    return [text(x) for x in reply]


def release(
    keys: QueueKeys, leases: Sequence[tuple[str, str, bool]], *, events_maxlen: int
) -> Call:
    """Give back (id, token, started) leases; see release.lua."""
    args: list[Arg] = [events_maxlen]
    for job_id, token, started in leases:
        args.extend((job_id, token, _flag(started)))
    return Call(
        "release",
        (keys.base, keys.active, keys.ready, keys.scheduled, keys.marker, keys.events,
         keys.blocked),
        tuple(args),
    )  # fmt: skip


def reap(keys: QueueKeys, *, batch: int, events_maxlen: int) -> Call:
    return Call(
        "reap",
        (keys.base, keys.active, keys.failed, keys.ready, keys.scheduled, keys.marker,
         keys.events, keys.blocked, keys.completed),
        (batch, events_maxlen),
    )  # fmt: skip


def decode_reap(reply: Sequence[Any]) -> ReapReply:
    return ReapReply(int(reply[0]), int(reply[1]), _optional_ms(reply[2]), bool(int(reply[3])))


def heartbeat(
    keys: QueueKeys,
    *,
    worker_id: str,
    lease_ms: int,
    worker_ttl_ms: int,
    info: str,
    leases: Sequence[tuple[str, str]],
) -> Call:
    args: list[Arg] = [worker_id, lease_ms, worker_ttl_ms, info]
    for job_id, token in leases:
        args.extend((job_id, token))
    return Call("heartbeat", (keys.base, keys.active, keys.workers), tuple(args))


def decode_heartbeat(reply: Sequence[Any]) -> list[str]:
    """The ids whose lease was lost."""
    return split_heartbeat(reply)[0]


def split_heartbeat(reply: Sequence[Any]) -> tuple[list[str], list[str]]:
    """(ids whose lease was lost, ids held and asked to abort): the second
    list follows an empty entry (job ids are never empty)."""
    ids = [text(x) for x in reply[1:]]
    if "" not in ids:
        return ids, []
    cut = ids.index("")
    return ids[:cut], ids[cut + 1 :]


def abort(keys: QueueKeys, job_id: str, *, events_maxlen: int) -> Call:
    return Call(
        "abort",
        (keys.base, keys.ready, keys.scheduled, keys.blocked, keys.events),
        (job_id, events_maxlen),
    )


def progress(keys: QueueKeys, *, job_id: str, token: str, value: float, events_maxlen: int) -> Call:
    return Call("progress", (keys.base, keys.events), (job_id, token, repr(value), events_maxlen))


def await_job(keys: QueueKeys, job_id: str) -> Call:
    return Call("await", (keys.base,), (job_id,))


def decode_await(reply: Sequence[Any]) -> AwaitReply:
    return AwaitReply(text(reply[0]), text(reply[1]) if len(reply) > 1 else None)


def decode_done(element: Any) -> AwaitReply:
    """An element of done:<id>: "<state>\\n<payload>"."""
    state, _, payload = text(element).partition("\n")
    return AwaitReply(state, payload)


def cancel(keys: QueueKeys, job_id: str, *, events_maxlen: int) -> Call:
    return Call(
        "cancel",
        (keys.base, keys.ready, keys.scheduled, keys.blocked, keys.events),
        (job_id, events_maxlen),
    )


def limits(
    keys: QueueKeys,
    what: str,
    *,
    group: str = "",
    concurrency: int | None = None,
    rate: int | None = None,
    window_ms: int | None = None,
    max_waiting: int | None = None,
) -> Call:
    """Set queue, group or concurrency key limits, or pause / resume a group;
    see limits.lua."""

    def given(value: int | None) -> Arg:
        return "" if value is None else value

    return Call(
        "limits",
        (keys.base, keys.meta, keys.groups, keys.gwait, keys.marker),
        (what, group, given(concurrency), given(rate), given(window_ms), given(max_waiting)),
    )


def promote(keys: QueueKeys, job_id: str, *, events_maxlen: int) -> Call:
    return Call(
        "promote",
        (keys.base, keys.ready, keys.scheduled, keys.marker, keys.events),
        (job_id, events_maxlen),
    )


def reprioritize(keys: QueueKeys, job_id: str, priority: int, *, events_maxlen: int) -> Call:
    return Call(
        "reprioritize", (keys.base, keys.ready, keys.events), (job_id, priority, events_maxlen)
    )


def retry(keys: QueueKeys, job_id: str, *, events_maxlen: int) -> Call:
    return Call(
        "retry",
        (keys.base, keys.failed, keys.ready, keys.scheduled, keys.marker, keys.events),
        (job_id, events_maxlen),
    )


def forget(keys: QueueKeys, items: Sequence[tuple[str, int]]) -> Call:
    """Delete archived finished jobs: (id, finished_at ms) pairs (§6.20)."""
    args: list[Arg] = []
    for job_id, finished_ms in items:
        args += [job_id, finished_ms]
    return Call("forget", (keys.base, keys.completed, keys.failed), tuple(args))


def decode_forget(raw: Any) -> tuple[int, int]:
    """(removed, kept)."""
    return int(raw[0]), int(raw[1])


def remove(keys: QueueKeys, job_id: str, *, events_maxlen: int) -> Call:
    return Call(
        "remove",
        (keys.base, keys.ready, keys.scheduled, keys.completed, keys.failed, keys.blocked,
         keys.events),
        (job_id, events_maxlen),
    )  # fmt: skip


def rate_limited(
    keys: QueueKeys,
    leases: Sequence[tuple[str, str]],
    *,
    wait_ms: int,
    scope: str,
    events_maxlen: int,
) -> Call:
    """Give (id, token) leases back unpunished and hold the queue or their
    groups `wait_ms` (rate_limited.lua)."""
    args: list[Arg] = [events_maxlen, wait_ms, scope]
    for job_id, token in leases:
        args.extend((job_id, token))
    return Call(
        "rate_limited",
        (keys.base, keys.active, keys.ready, keys.scheduled, keys.marker, keys.events,
         keys.blocked, keys.meta, keys.groups, keys.gwait),
        tuple(args),
    )  # fmt: skip


def checkpoint(keys: QueueKeys, *, job_id: str, token: str, state: str) -> Call:
    """Save a running job's resumable state (checkpoint.lua)."""
    return Call("checkpoint", (keys.base,), (job_id, token, state))


def defer(
    keys: QueueKeys, items: Sequence[tuple[str, str, int, str]], *, events_maxlen: int
) -> Call:
    """Move running jobs back, (id, token, delay_ms, checkpoint or ''), no
    attempt counted (defer.lua)."""
    args: list[Arg] = [events_maxlen]
    for job_id, token, delay_ms, state in items:
        args.extend((job_id, token, delay_ms, state))
    return Call(
        "defer",
        (keys.base, keys.active, keys.ready, keys.scheduled, keys.marker, keys.events,
         keys.blocked),
        tuple(args),
    )  # fmt: skip

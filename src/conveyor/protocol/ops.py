"""Pure operations: build each script's KEYS/ARGV and decode its reply.

Nearly every operation is "build a Call, run one script, decode the reply";
keeping the first and last step here lets the sync and async clients share
everything but the line that does I/O. The claim (the worker's hot decoder) is in
claims.py and the Call with the reply helpers in calls.py; both are re-exported here.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from conveyor.protocol.calls import Arg as Arg
from conveyor.protocol.calls import Call as Call
from conveyor.protocol.calls import flag, optional_ms
from conveyor.protocol.calls import text as text
from conveyor.protocol.claims import CLAIM_ARITY as CLAIM_ARITY
from conveyor.protocol.claims import COMPACT_FIXED as COMPACT_FIXED
from conveyor.protocol.claims import ClaimedJob as ClaimedJob
from conveyor.protocol.claims import ClaimReply as ClaimReply
from conveyor.protocol.claims import claim as claim
from conveyor.protocol.claims import decode_claim as decode_claim
from conveyor.protocol.keys import QueueKeys
from conveyor.protocol.record import RECORD_DEFAULTS

# Fields per job in the enqueue script's ARGV (see enqueue.lua).
ENQUEUE_ARITY = 6
NEW_ARITY = 3  # enqueue_new's ARGV entries per job: id, task, data
# One job of an enqueue_new call: (id, task, data).
NewJob = tuple[str, str, str]
SKIP_ARITY = 4  # enqueue_skip's ARGV entries per job: id, task, data, opts


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
            f"u_data={flag(self.data)}", f"u_run_at={self.run_at}",
            f"u_max_failures={flag(self.max_failures)}",
            f"u_max_stalls={flag(self.max_stalls)}",
            f"u_min_backoff={flag(self.min_backoff)}",
            f"u_max_backoff={flag(self.max_backoff)}", f"u_reset={flag(self.reset_counts)}",
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
        args.extend((it.id, it.token, it.error, flag(it.permanent), delay, it.jitter))
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
        args.extend((job_id, token, flag(started)))
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
    return ReapReply(int(reply[0]), int(reply[1]), optional_ms(reply[2]), bool(int(reply[3])))


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

"""Pure operations: build each script's KEYS/ARGV and decode its reply.

Nearly every operation is "build a Call, run one script, decode the reply";
keeping the first and last step here lets the sync and async clients share
everything but the line that does I/O. The claim (the worker's hot decoder) is in
claims.py, the enqueue family in enqueues.py and the Call with the reply helpers in
calls.py; all are re-exported here.
"""

from __future__ import annotations

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
from conveyor.protocol.enqueues import ENQUEUE_ARITY as ENQUEUE_ARITY
from conveyor.protocol.enqueues import NEW_ARITY as NEW_ARITY
from conveyor.protocol.enqueues import SKIP_ARITY as SKIP_ARITY
from conveyor.protocol.enqueues import Enqueued as Enqueued
from conveyor.protocol.enqueues import JobSpec as JobSpec
from conveyor.protocol.enqueues import NewJob as NewJob
from conveyor.protocol.enqueues import UpsertRules as UpsertRules
from conveyor.protocol.enqueues import decode_enqueue as decode_enqueue
from conveyor.protocol.enqueues import decode_enqueue_skip as decode_enqueue_skip
from conveyor.protocol.enqueues import enqueue as enqueue
from conveyor.protocol.enqueues import enqueue_new as enqueue_new
from conveyor.protocol.enqueues import enqueue_new_flat as enqueue_new_flat
from conveyor.protocol.enqueues import enqueue_skip as enqueue_skip
from conveyor.protocol.enqueues import enqueue_skip_keys as enqueue_skip_keys
from conveyor.protocol.enqueues import resend_of_new as resend_of_new
from conveyor.protocol.enqueues import skip_created as skip_created
from conveyor.protocol.keys import QueueKeys


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
    sent: bool = False  # a final stall's flow hand-off went to the outbox: drain it


@dataclass(frozen=True, slots=True)
class AwaitReply:
    state: str  # missing | pending | completed | failed
    payload: str | None


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


# A reply word ending in this was written by a call that also wrote to its
# queue's outbox (`failed+`, `removed+`, `cancelled+`): drain it now (§14.5).
OUTBOX_MARK = "+"


def word(reply: Any) -> str:
    """A reply word without its outbox mark."""
    return text(reply).removesuffix(OUTBOX_MARK)


def marked(reply: Any) -> bool:
    """Whether a reply word carries the outbox mark."""
    return text(reply).endswith(OUTBOX_MARK)


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
    """Per job: retried | delayed | failed | lost (see fail_handed_off)."""
    return [word(x) for x in reply]


def fail_handed_off(reply: Sequence[Any]) -> bool:
    """Whether a fail call left a flow hand-off in the outbox (a `failed+`)."""
    return any(marked(x) for x in reply)


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
    sent = len(reply) > 4 and bool(int(reply[4]))
    return ReapReply(
        int(reply[0]), int(reply[1]), optional_ms(reply[2]), bool(int(reply[3])), sent
    )


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


def migrate(keys: QueueKeys, *, force: bool, cursor: int, count: int) -> Call:
    """One batch of the version 3 -> 4 upgrade (migrate.lua)."""
    return Call(
        "migrate",
        (keys.base, keys.meta, keys.workers, keys.groups, keys.gwait),
        (1 if force else 0, cursor, count),
    )


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


def suspect(keys: QueueKeys, job_id: str, action: str, *, events_maxlen: int) -> Call:
    """An operator's `release` or `fail` of a suspect (suspect.lua)."""
    return Call(
        "suspect",
        (keys.base, keys.ready, keys.scheduled, keys.failed, keys.events, keys.marker),
        (job_id, action, events_maxlen),
    )

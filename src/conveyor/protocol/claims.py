"""claim.lua's call and its reply, full or compact (protocol §6.2): the one hot decoder.

A worker decodes every job it runs here, so the common case (a job at its defaults, fields as
claim.lua writes them) takes one call per job, and anything odd falls back to decoding field
by field. `ops` re-exports the public names.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from conveyor.protocol.calls import Arg, Call, bytes_or_none, flag, int_or_none, optional_ms, text
from conveyor.protocol.keys import QueueKeys
from conveyor.protocol.record import RECORD_DEFAULTS

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
    held: bool = False  # a suspect met was not leased (claim.lua ARGV[7])


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
    isolates: bool = False,
    compact: bool = True,
) -> Call:
    """`alone`: the worker runs nothing now, so it may take a suspect, alone
    (claim.lua). `isolates`: the worker runs a suspect isolated beside its
    other jobs; `alone` then says it has room for one more suspect, so the
    call may lease one and goes on, else it steps over the suspects it meets.
    `compact`: ask for the compact reply; False sends the ARGV of a client
    that predates it and gets the full reply (decode either with the same
    `compact` given to decode_claim)."""
    suspects = (2 if alone else 3) if isolates else flag(alone)
    args: tuple[Arg, ...] = (worker_id, count, lease_ms, token, promote, events_maxlen,
                             suspects)  # fmt: skip
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
    return ClaimReply(int(reply[0]), optional_ms(reply[1]), jobs, int(reply[2]) == 1)


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
        failures=int_or_none(f[4]),
        stalls=int_or_none(f[5]),
        max_failures=int_or_none(f[6]),
        max_stalls=int_or_none(f[7]),
        min_backoff_ms=int_or_none(f[8]),
        max_backoff_ms=int_or_none(f[9]),
        timeout_ms=int_or_none(f[10]),
        priority=int_or_none(f[11]),
        created_at_ms=int_or_none(f[12]),
        schedule=None if f[13] is None else text(f[13]),
        headers=None if f[14] is None else text(f[14]),
        checkpoint=bytes_or_none(f[15]),
        expires_at_ms=int_or_none(f[16]),
    )

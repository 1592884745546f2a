"""The enqueue family's calls: enqueue, enqueue_new and enqueue_skip, the JobSpec
they send and the Enqueued they decode (protocol §6.1). `ops` re-exports the public names.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from conveyor.protocol.calls import Arg, Call, flag, text
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

"""Job options: defaults, validation, and the encoded JobSpec the script takes.

Everything is checked here, before any I/O, so bad input raises a typed
error and leaves Redis untouched.
"""

from __future__ import annotations

import binascii
import functools
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from conveyor import serializers
from conveyor.errors import (
    InvalidJobIdError,
    InvalidNameError,
    PayloadTooLargeError,
    UnknownOptionError,
    ValidationError,
)
from conveyor.protocol.keys import ID_PATTERN, NAME_PATTERN
from conveyor.protocol.ops import JobSpec, UpsertRules
from conveyor.timeutil import delay_until_ms, epoch_ms, to_ms

MAX_PRIORITY = 2**21
PRIORITIES = {"high": 0, "normal": 1_000, "low": 2_000}
DEFAULT_MAX_PAYLOAD = 512 * 1024
TASK_NAME_MAX = 200
# Task names and index values (protocol §1 "Text"): 1-200 code points, none a
# control character (C0, DEL, C1) or a surrogate. Defined by code point ranges,
# not by a Unicode database, so every implementation agrees on every string.
TEXT_PATTERN = re.compile(r"[^\x00-\x1f\x7f-\x9f\ud800-\udfff]{1,200}")

RunAtRule = bool | Literal["if_later", "if_earlier"]
_RUN_AT_RULES: dict[object, str] = {
    True: "1",
    False: "0",
    "if_later": "later",
    "if_earlier": "earlier",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class JobDefaults:
    """Per-queue defaults for the options a job does not set itself."""

    priority: int = PRIORITIES["normal"]
    max_failures: int = 3
    max_stalls: int = 3
    min_backoff: float = 1.0
    max_backoff: float = 300.0
    timeout: float = 300.0
    result_ttl: float = 86_400.0


ENQUEUE_OPTIONS = frozenset(
    {
        "id", "delay", "run_at", "priority", "max_failures", "max_stalls", "min_backoff",
        "max_backoff", "timeout", "result_ttl", "lifo", "group", "update_data",
        "update_run_at", "update_max_failures", "update_max_stalls", "update_min_backoff",
        "update_max_backoff", "reset_counts", "index", "headers", "expires",
        "dedup", "dedup_ttl", "debounce", "concurrency_keys",
    }
)  # fmt: skip


def check_name(value: object, what: str) -> str:
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
        raise InvalidNameError(
            f"invalid {what} {value!r}: use 1-128 of A-Z a-z 0-9 _ . - (starting alphanumeric)"
        )
    return value


def check_task_name(value: object) -> str:
    if not isinstance(value, str) or not TEXT_PATTERN.fullmatch(value):
        raise InvalidNameError(
            f"invalid task name {value!r}: 1-{TASK_NAME_MAX} characters, no control characters"
        )
    return value


def check_job_id(value: object) -> str:
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
        shown = value if not isinstance(value, str) or len(value) < 80 else value[:80] + "..."
        raise InvalidJobIdError(
            f"invalid job id {shown!r}: 1-256 printable ASCII characters, no spaces"
        )
    return value


ID_BYTES = 12  # 16 characters of base64; a multiple of 3, so ids never carry padding


ID_BATCH = 64  # ids drawn per os.urandom call by new_job_id
_spare_ids: list[str] = []
if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    # a forked child must not hand out its parent's ids
    os.register_at_fork(after_in_child=_spare_ids.clear)


def new_job_id() -> str:
    """96 random bits in 16 characters (A-Z a-z 0-9 _ .): short ids keep the
    record key, the ready entry and the events small. Drawn ID_BATCH at a
    time: one system call per id cost as much as the rest of the id."""
    while True:
        try:
            return _spare_ids.pop()
        except IndexError:  # empty, maybe emptied by another thread since
            _spare_ids.extend(_fresh_ids(ID_BATCH))


_ALTCHARS = bytes.maketrans(b"+/", b"_.")


def _fresh_ids(count: int) -> list[str]:
    """`count` new 16-character ids from one os.urandom call: ID_BYTES random
    bytes each in base64 with `_.` for `+/` (binascii directly: half the cost
    of base64.b64encode)."""
    random = os.urandom(ID_BYTES * count)
    text = binascii.b2a_base64(random, newline=False).translate(_ALTCHARS).decode("ascii")
    return [text[k : k + 16] for k in range(0, len(text), 16)]


def _count(value: object, what: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValidationError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return value


def _seconds(value: object, what: str) -> int:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValidationError(f"{what} must be a number of seconds >= 0, got {value!r}")
    if value > 10 * 365 * 86_400:
        raise ValidationError(f"{what} is more than ten years: {value!r}")
    return to_ms(value)


def check_priority(value: object) -> int:
    if isinstance(value, str):
        if value not in PRIORITIES:
            raise ValidationError(f"priority name must be one of {sorted(PRIORITIES)}: {value!r}")
        return PRIORITIES[value]
    prio = _count(value, "priority")
    if prio > MAX_PRIORITY:
        raise ValidationError(f"priority must be at most 2**21, got {value!r}")
    return prio


def _run_at_ms(value: object) -> int:
    if isinstance(value, datetime):
        return epoch_ms(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValidationError(f"run_at must be an aware datetime or epoch seconds: {value!r}")
    return epoch_ms(value)


def _bool(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise ValidationError(f"{what} must be True or False, got {value!r}")
    return value


def _rules(opts: Mapping[str, Any]) -> UpsertRules:
    update_data = _bool(opts.get("update_data", True), "update_data")
    run_at_rule = opts.get("update_run_at", True)
    if run_at_rule not in _RUN_AT_RULES or (
        isinstance(run_at_rule, int) and not isinstance(run_at_rule, bool)
    ):
        raise ValidationError(
            f"update_run_at must be True, False, 'if_later' or 'if_earlier': {run_at_rule!r}"
        )
    return UpsertRules(
        data=update_data,
        run_at=_RUN_AT_RULES[run_at_rule],
        max_failures=_bool(opts.get("update_max_failures", False), "update_max_failures"),
        max_stalls=_bool(opts.get("update_max_stalls", False), "update_max_stalls"),
        min_backoff=_bool(opts.get("update_min_backoff", False), "update_min_backoff"),
        max_backoff=_bool(opts.get("update_max_backoff", False), "update_max_backoff"),
        reset_counts=_bool(opts.get("reset_counts", update_data), "reset_counts"),
    )


def build_index(value: object) -> tuple[tuple[str, str], ...]:
    """Property index entries: {field: value}; values are str or int."""
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise ValidationError(f"index must be a mapping of field to value, got {value!r}")
    entries = []
    for field, raw in value.items():
        check_name(field, "index field")
        if isinstance(raw, bool) or not isinstance(raw, str | int):
            raise ValidationError(f"index value of {field!r} must be a str or int: {raw!r}")
        text = str(raw)
        if not TEXT_PATTERN.fullmatch(text):
            raise ValidationError(
                f"index value of {field!r} must be 1-200 characters, no control characters"
            )
        entries.append((field, text))
    return tuple(entries)


def _group(value: object) -> str:
    if value is None:
        return ""
    return check_name(value, "group key")


HEADER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
HEADER_VALUE = re.compile(r"[\x20-\x7e]{0,1024}")
MAX_HEADERS = 4096  # bytes of the record's `headers` field


def build_headers(value: object) -> str:
    """Headers that travel with the job (trace context, say): a mapping of
    names to printable ASCII values, as the record's compact JSON text."""
    if value is None:
        return ""
    if not isinstance(value, Mapping):
        raise ValidationError(f"headers must be a mapping of name to value, got {value!r}")
    for name, text in value.items():
        if not isinstance(name, str) or not HEADER_NAME.fullmatch(name):
            raise ValidationError(f"invalid header name {name!r}: 1-64 of A-Z a-z 0-9 _ . -")
        if not isinstance(text, str) or not HEADER_VALUE.fullmatch(text):
            raise ValidationError(
                f"header {name!r} must be printable ASCII text of at most 1024 characters"
            )
    if not value:
        return ""
    encoded = serializers.dumps(dict(sorted(value.items())), what="headers")
    if len(encoded) > MAX_HEADERS:
        raise ValidationError(f"headers take {len(encoded)} bytes; at most {MAX_HEADERS}")
    return encoded


# Validators of the options that have a per-queue default, by option name.
_DEFAULTED: dict[str, Any] = {
    "priority": check_priority,
    "max_failures": lambda v: _count(v, "max_failures", minimum=1),
    "max_stalls": lambda v: _count(v, "max_stalls", minimum=1),
    "min_backoff": lambda v: _seconds(v, "min_backoff"),
    "max_backoff": lambda v: _seconds(v, "max_backoff"),
    "timeout": lambda v: _seconds(v, "timeout"),
    "result_ttl": lambda v: _seconds(v, "result_ttl"),
}
_DEFAULT_RULES = UpsertRules()


@functools.lru_cache(maxsize=64)
def _validated_defaults(defaults: JobDefaults) -> dict[str, Any]:
    """A queue's defaults validated once, not once per job."""
    return {name: check(getattr(defaults, name)) for name, check in _DEFAULTED.items()}


def _payload(data: Any, max_payload: int) -> str:
    payload = serializers.dumps(data)
    # a str of n characters is at most 4n bytes: encode only when it could be too big
    if len(payload) * 4 > max_payload:
        size = len(payload.encode("utf-8"))
        if size > max_payload:
            raise PayloadTooLargeError(f"data is {size} bytes, over the {max_payload}-byte limit")
    return payload


def build_spec(
    task: str,
    data: Any,
    options: Mapping[str, Any],
    *,
    defaults: JobDefaults,
    max_payload: int,
) -> JobSpec:
    """Validate one job's task, data and options into a JobSpec."""
    if not options:  # the common case: the queue's defaults, validated once
        return _default_spec(defaults)(
            new_job_id(), _task_name(task), _payload(data, max_payload), ""
        )
    values = _validated_defaults(defaults)
    unknown = set(options) - ENQUEUE_OPTIONS
    if unknown:
        raise UnknownOptionError(
            f"unknown option(s) {sorted(unknown)}; valid: {sorted(ENQUEUE_OPTIONS)}"
        )
    values = dict(values)
    for name in options.keys() & _DEFAULTED.keys():
        values[name] = _DEFAULTED[name](options[name])
    if values["max_backoff"] < values["min_backoff"]:
        raise ValidationError("max_backoff must be >= min_backoff")
    delay, run_at = options.get("delay"), options.get("run_at")
    if delay is not None and run_at is not None:
        raise ValidationError("give delay or run_at, not both")
    debounce = options.get("debounce")
    if debounce is not None:
        if delay is not None or run_at is not None:
            raise ValidationError("debounce sets the delay itself: no delay or run_at with it")
        delay = debounce
    job_id = options.get("id")
    return JobSpec(
        id=new_job_id() if job_id is None else check_job_id(job_id),
        task=check_task_name(task),
        data=_payload(data, max_payload),
        priority=values["priority"],
        delay_ms=None if delay is None else _seconds(delay, "delay"),
        run_at_ms=None if run_at is None else _run_at_ms(run_at),
        max_failures=values["max_failures"],
        max_stalls=values["max_stalls"],
        min_backoff_ms=values["min_backoff"],
        max_backoff_ms=values["max_backoff"],
        timeout_ms=values["timeout"],
        result_ttl_ms=values["result_ttl"],
        lifo=_bool(options.get("lifo", False), "lifo"),
        group=_group(options.get("group")),
        rules=_rules(options),
        # only a given id needs a request id: a generated one exists only after a re-send
        request="" if job_id is None else os.urandom(8).hex(),
        index=build_index(options.get("index")),
        given_id=job_id is not None,
        headers=build_headers(options.get("headers")),
        extra=_extra(options),
    )


def _extra(options: Mapping[str, Any]) -> tuple[str, ...]:
    """The opts lines of the version 4 job semantics (docs/protocol.md §16)."""
    lines = []
    expires = options.get("expires")
    if expires is not None:
        lines.append(f"expire_in={_expire_in_ms(expires)}")
    lines.extend(_dedup(options))
    keys = options.get("concurrency_keys")
    if keys is not None:
        lines.append(f"ckeys={','.join(_concurrency_keys(keys))}")
    return tuple(lines)


def _concurrency_keys(value: object) -> list[str]:
    """1-4 distinct key names (§16.5)."""
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValidationError(f"concurrency_keys must be a list of names, got {value!r}")
    names = [check_name(k, "concurrency key") for k in value]
    if not 1 <= len(names) <= 4 or len(set(names)) != len(names):
        raise ValidationError(f"concurrency_keys must be 1-4 distinct names, got {value!r}")
    return names


def _dedup(options: Mapping[str, Any]) -> list[str]:
    """Deduplication (§16.3): `dedup` alone is simple mode, with `dedup_ttl`
    throttle, with `debounce` debounce."""
    key, ttl, debounce = (options.get(n) for n in ("dedup", "dedup_ttl", "debounce"))
    if key is None:
        if ttl is not None or debounce is not None:
            raise ValidationError("dedup_ttl and debounce need a dedup key (dedup=...)")
        return []
    if not isinstance(key, str) or not ID_PATTERN.fullmatch(key):
        raise ValidationError(f"dedup must be 1-256 printable ASCII characters: {key!r}")
    if ttl is not None and debounce is not None:
        raise ValidationError("give dedup_ttl (throttle) or debounce, not both")
    if ttl is not None:
        return [
            f"dedup={key}",
            "dedup_mode=throttle",
            f"dedup_ttl={_positive_ms(ttl, 'dedup_ttl')}",
        ]
    if debounce is not None:
        _positive_ms(debounce, "debounce")
        return [f"dedup={key}", "dedup_mode=debounce"]
    return [f"dedup={key}", "dedup_mode=simple"]


def _positive_ms(value: object, what: str) -> int:
    ms = _seconds(value, what)
    if ms < 1:
        raise ValidationError(f"{what} must be at least 0.001 s, got {value!r}")
    return ms


def _expire_in_ms(value: object) -> int:
    """`expires`: seconds from now (or a timedelta), or an aware datetime;
    as the ms from now after which the job, not started, fails instead."""
    if isinstance(value, datetime):
        ms = delay_until_ms(value)
        if ms < 1:
            raise ValidationError(f"expires is already past: {value!r}")
        return ms
    return _positive_ms(value, "expires")


class SpecBuilder:
    """build_spec for one queue's defaults, with the no-options case
    prepared once: only the id, task, data and request id vary per job."""

    def __init__(self, defaults: JobDefaults, max_payload: int) -> None:
        self.defaults = defaults
        self.max_payload = max_payload
        self._make = _default_spec(defaults)
        self._plain = self._make("x", "t", "null", "").options() == ""

    def one(self, task: str, data: Any, options: Mapping[str, Any]) -> JobSpec:
        if options:
            return build_spec(
                task, data, options, defaults=self.defaults, max_payload=self.max_payload
            )
        return self._make(new_job_id(), _task_name(task), _payload(data, self.max_payload), "")

    def plain(self, task: str, data: Any) -> tuple[str, str, str] | None:
        """(a new id, the task, the data) of a job without options whose
        defaults are the protocol's, so that no JobSpec is needed; else None."""
        if not self._plain:
            return None
        return new_job_id(), _task_name(task), _payload(data, self.max_payload)

    def plain_many(self, tasks: Sequence[Any], datas: Sequence[Any]) -> list[str] | None:
        """id, task, data, id, task, data, ... of jobs without options, as
        `plain` makes them (the ids from one urandom call); None unless the
        queue's defaults are the protocol's."""
        if not self._plain:
            return None
        max_payload = self.max_payload
        flat: list[str] = []
        for job_id, task, data in zip(_fresh_ids(len(tasks)), tasks, datas, strict=True):
            flat += (job_id, _task_name(task), _payload(data, max_payload))
        return flat

    def many(self, jobs: Sequence[tuple[str, Any, Mapping[str, Any]]]) -> list[JobSpec]:
        """Specs of (task, data, options) jobs; the random ids of the jobs
        without options come from one urandom call."""
        make, max_payload = self._make, self.max_payload
        specs = []
        for job_id, (task, data, options) in zip(_fresh_ids(len(jobs)), jobs, strict=True):
            if options:
                specs.append(self.one(task, data, options))
            else:
                specs.append(make(job_id, _task_name(task), _payload(data, max_payload), ""))
        return specs


def _task_name(task: object) -> str:
    """check_task_name, remembered for the task names (str) a producer uses."""
    return _known_task_name(task) if type(task) is str else check_task_name(task)


@functools.lru_cache(maxsize=1024)
def _known_task_name(task: str) -> str:
    return check_task_name(task)


@functools.lru_cache(maxsize=64)
def _default_spec(defaults: JobDefaults) -> Callable[[str, str, str, str], JobSpec]:
    """A maker of JobSpecs with a queue's defaults and no options: only the
    id, task, data and request id vary."""
    values = _validated_defaults(defaults)

    def make(job_id: str, task: str, data: str, request: str) -> JobSpec:
        return JobSpec(
            job_id, task, data, values["priority"], None, None, values["max_failures"],
            values["max_stalls"], values["min_backoff"], values["max_backoff"],
            values["timeout"], values["result_ttl"], False, "", _DEFAULT_RULES, request, (),
            False,
        )  # fmt: skip

    return make

"""The reading half of QueueCore (core.py), I/O-free: the keys and decoders of
inspecting jobs, of the metrics history and job logs, and of the workers.
QueueCore inherits it; the queue's name and keys are QueueCore's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from conveyor import metrics, serializers
from conveyor.client.models import WorkerInfo
from conveyor.errors import ValidationError
from conveyor.job import FINISHED_STATES, Job, JobState, job_from_hash
from conveyor.options import build_index, check_job_id, check_name
from conveyor.protocol import ops
from conveyor.protocol.keys import ID_PATTERN, QueueKeys


class CoreViews:
    """What the reading side of both clients (sync_views.py, aio_views.py)
    builds its reads from and decodes their replies with."""

    name: str
    keys: QueueKeys

    # --- inspection ----------------------------------------------------------

    def index_key(self, field: str, value: str | int) -> str:
        ((name, text),) = build_index({field: value})
        return self.keys.index(name, text)

    def job_key(self, job_id: str) -> str:
        return self.keys.job(check_job_id(job_id))

    def lookup_key(self, job_id: str) -> str | None:
        """The record key of `job_id` for a lookup; None for a text no job id can be
        (`get` answers None, as for any job that is not there); a non-text is an error."""
        if isinstance(job_id, str) and not ID_PATTERN.fullmatch(job_id):
            return None
        return self.job_key(job_id)

    def job(self, job_id: str, raw: Mapping[Any, Any], now_ms: int) -> Job | None:
        """The job of a record read at server time `now_ms`; None when there is
        none, or when it is finished and past its result_ttl (docs/protocol.md
        §4.4: a record awaiting its sweep reads as gone)."""
        if not raw:
            return None
        job = job_from_hash(self.name, job_id, raw)
        if job.retained_until is not None and job.retained_until <= datetime.fromtimestamp(
            now_ms / 1000, UTC
        ):
            return None
        return job

    def twin(self, job_id: str, raw: Mapping[Any, Any]) -> Job | None:
        """A blocked twin (docs/protocol.md §4.3) as a Job in state `blocked`."""
        return job_from_hash(self.name, job_id, raw) if raw else None

    def twin_key(self, job_id: str) -> str:
        return self.keys.blocked_job(check_job_id(job_id))

    def count_keys_at(self, groups: Sequence[Any], now_ms: int) -> list[tuple[str, str | None]]:
        """What `counts_from` adds up: (key, None) to count a whole zset (each
        group's waiting jobs, then each index), (key, lowest score excluded)
        for finished jobs, counted only while retained (their index score is
        the expiry: past it they read as gone)."""
        keys: list[tuple[str, str | None]] = [
            (self.keys.group_ready(ops.text(group)), None) for group in groups
        ]
        for state, key in self.count_keys():
            keys.append((key, f"({now_ms}" if state in FINISHED_STATES else None))
        keys.append((self.keys.base + "parked", None))  # waiting, parked on a key (§16.5)
        return keys

    def counts_from(self, groups: int, replies: Sequence[Any]) -> dict[JobState, int]:
        """Jobs per state from the replies of `count_keys_at` for `groups` groups."""
        in_groups = sum(int(n) for n in replies[:groups])
        *indexes, parked = replies[groups:]
        counts = {state: int(n) for (state, _), n in zip(self.count_keys(), indexes, strict=True)}
        counts[JobState.WAITING] += in_groups + int(parked)
        return counts

    def waiting_lists(self, groups: Sequence[Any], held: Sequence[Any]) -> list[str]:
        """Every list of waiting jobs, in listing order: the ungrouped, those
        parked on a key, then each group's by group name (§3.2, §16.5)."""
        names = sorted({ops.text(g) for g in (*groups, *held)})
        return [self.keys.ready, self.keys.base + "parked", *map(self.keys.group_ready, names)]

    def id_index(
        self, state: JobState | str, group: str | None, now_ms: int
    ) -> tuple[str, str | None]:
        """The index listing ids in `state`, and for finished ones the lowest
        score excluded: they are listed only while retained."""
        key = self.index_of(state, group)
        return key, f"({now_ms}" if JobState(state) in FINISHED_STATES else None

    def count_keys(self) -> list[tuple[JobState, str]]:
        k = self.keys
        return [
            (JobState.WAITING, k.ready),
            (JobState.DELAYED, k.scheduled),
            (JobState.ACTIVE, k.active),
            (JobState.COMPLETED, k.completed),
            (JobState.FAILED, k.failed),
            (JobState.BLOCKED, k.blocked),
            (JobState.WAITING_CHILDREN, k.waiting_children),
        ]

    def index_of(self, state: JobState | str, group: str | None = None) -> str:
        """The index key that lists the jobs in `state` (waiting jobs of a
        group have their own)."""
        indexes = dict(self.count_keys())
        try:
            key = indexes[JobState(state)]
        except (KeyError, ValueError):
            raise ValidationError(f"no index for state {state!r}") from None
        if group is not None:
            if JobState(state) is not JobState.WAITING:
                raise ValidationError("only waiting jobs are indexed per group")
            return self.keys.group_ready(check_name(group, "group key"))
        return key

    # --- metrics history and job logs (conveyor.metrics, docs/protocol.md §15) ----

    def history_keys(self, time_reply: Any, minutes: int) -> tuple[int, list[int], list[str]]:
        """Redis TIME's now in ms, and the hours (and their counts keys)
        that the last `minutes` minutes cover."""
        now_ms = int(time_reply[0]) * 1000 + int(time_reply[1]) // 1000
        hours = metrics.hours_covering(now_ms, minutes)
        return now_ms, hours, [self.keys.metrics(h) for h in hours]

    def history(
        self, now_ms: int, minutes: int, hours: list[int], raws: list[Any]
    ) -> list[metrics.MinuteCounts]:
        return metrics.minute_counts(now_ms, minutes, dict(zip(hours, raws, strict=True)))

    def timings_keys(self, time_reply: Any, hours: int) -> list[str]:
        """The timings keys of the hours covering the last `hours`, then their maxima's."""
        now_ms = int(time_reply[0]) * 1000 + int(time_reply[1]) // 1000
        covered = metrics.hours_covering(now_ms, hours * 60)
        return [self.keys.timings(h) for h in covered] + [self.keys.timing_max(h) for h in covered]

    def timings(self, raws: list[Any]) -> list[metrics.TaskTimings]:
        """The replies of timings_keys' keys, added up by task."""
        half = len(raws) // 2
        return metrics.task_timings(raws[:half], raws[half:])

    def totals(self, raw: Mapping[Any, Any]) -> dict[str, int]:
        found = {ops.text(k): int(ops.text(v)) for k, v in raw.items()}
        return {name: found.get(name, 0) for name in metrics.TOTALS}

    def log_key(self, job_id: str) -> str:
        return self.keys.job_log(check_job_id(job_id))

    # --- workers -------------------------------------------------------------

    def workers(self, ids: Sequence[Any], infos: Sequence[Any]) -> list[WorkerInfo]:
        alive = []
        for worker_id, info in zip(ids, infos, strict=True):
            if info is not None:
                alive.append(WorkerInfo(ops.text(worker_id), _worker_info(info)))
        return alive


def _worker_info(raw: str | bytes) -> dict[str, Any]:
    """A worker's self-description (protocol §8.1), read tolerantly: another
    implementation may write JSON that is not an object, or no JSON at all."""
    try:
        info = serializers.loads(raw)
    except ValueError:
        info = None
    if isinstance(info, dict):
        return info
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    return {"unreadable": text[:200]}

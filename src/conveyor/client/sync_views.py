"""The reading and operating half of Queue (sync.py): inspecting jobs, the
metrics history and job logs, and what the dashboard and the operator's CLI use. Queue
inherits it; the connection and what it needs of it are Queue's."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import redis

from conveyor.client import inspect
from conveyor.client.connection import block_slice
from conveyor.client.core import QueueCore, server_ms
from conveyor.client.events import Event, decode_events
from conveyor.client.models import WorkerInfo
from conveyor.client.transport import translated
from conveyor.job import Job, JobState
from conveyor.metrics import WEEK_MINUTES, MinuteCounts, TaskTimings, check_window
from conveyor.options import check_job_id
from conveyor.protocol import ops
from conveyor.protocol.keys import queue_registry


class QueueViews:
    """Read-only views and bulk operations of one queue; Queue provides the
    connection (`client`, `_send`) these use."""

    core: QueueCore
    _pool_options: dict[str, Any]

    @property
    def name(self) -> str:
        raise NotImplementedError  # Queue's

    @property
    def client(self) -> redis.Redis:
        raise NotImplementedError  # Queue's

    def _send(self, calls: list[ops.Call]) -> list[Any]:
        raise NotImplementedError  # Queue's

    def _carry(self) -> None:
        raise NotImplementedError  # Queue's: carries what a remove left in the outbox

    # --- inspecting ------------------------------------------------------------

    def get(self, job_id: str) -> Job | None:
        """The job, or None when there is none: a finished job past its
        result_ttl is gone, even before a sweep deletes its record, and an id
        no job can have (malformed: `"a b"`, over 256 characters) is none too."""
        key = self.core.lookup_key(job_id)
        if key is None:
            return None
        with translated():
            pipe = self.client.pipeline(transaction=False)
            pipe.time()
            pipe.hgetall(key)
            clock, raw = pipe.execute()
        return self.core.job(job_id, raw, server_ms(clock))

    def _twins(self, job_ids: Sequence[str]) -> list[Job | None]:
        with translated():
            pipe = self.client.pipeline(transaction=False)
            for job_id in job_ids:
                pipe.hgetall(self.core.twin_key(job_id))
            raws = pipe.execute()
        return [self.core.twin(i, raw) for i, raw in zip(job_ids, raws, strict=True)]

    def get_blocked(self, job_id: str) -> Job | None:
        """The blocked twin of a running singleton: the next run, enqueued while
        this one is active (state `blocked`); None when there is none."""
        with translated():
            raw = self.client.hgetall(self.core.twin_key(job_id))
        return self.core.twin(job_id, raw)

    def counts(self) -> dict[JobState, int]:
        """Jobs per state; waiting includes the jobs of every group; finished
        jobs count while retained (not past their result_ttl)."""
        keys = self.core.keys
        with translated():
            pipe = self.client.pipeline(transaction=False)
            pipe.time()
            pipe.zrange(keys.groups, 0, -1)
            pipe.zrange(keys.gwait, 0, -1)
            clock, runnable, held = pipe.execute()
            grouped = [*runnable, *held]
            pipe = self.client.pipeline(transaction=False)
            for key, since in self.core.count_keys_at(grouped, server_ms(clock)):
                if since is None:
                    pipe.zcard(key)
                else:
                    pipe.zcount(key, since, "+inf")
            replies = pipe.execute()
        return self.core.counts_from(len(grouped), replies)

    def job_ids(
        self,
        state: JobState | str,
        *,
        group: str | None = None,
        offset: int = 0,
        limit: int = 100,
        reverse: bool = False,
    ) -> list[str]:
        """Ids of jobs in `state`, in index order (waiting: one `group`'s in run
        order, or every waiting job: the ungrouped in run order, then each
        group's by group name; delayed: due time; active: lease deadline;
        finished: expiry, those still retained), or from its end with `reverse`
        (finished: newest first)."""
        if group is None and state == JobState.WAITING:
            return self._all_waiting(offset, limit, reverse)
        with translated():
            key, since = self.core.id_index(state, group, server_ms(self.client.time()))
            if since is None:
                read = self.client.zrevrange if reverse else self.client.zrange
                ids = read(key, offset, offset + limit - 1)
            elif reverse:
                ids = self.client.zrevrangebyscore(key, "+inf", since, start=offset, num=limit)
            else:
                ids = self.client.zrangebyscore(key, since, "+inf", start=offset, num=limit)
        return [ops.text(i) for i in ids]

    def _all_waiting(self, offset: int, limit: int, reverse: bool) -> list[str]:
        keys = self.core.keys
        with translated():
            pipe = self.client.pipeline(transaction=False)
            pipe.zrange(keys.groups, 0, -1)
            pipe.zrange(keys.gwait, 0, -1)
            lists = self.core.waiting_lists(*(pipe.execute()))
            pipe = self.client.pipeline(transaction=False)
            for key in lists:
                pipe.zcard(key)
            sizes = [int(n) for n in pipe.execute()]
            pipe = self.client.pipeline(transaction=False)
            for index, first, last in inspect.slices(sizes, offset, limit, reverse):
                (pipe.zrevrange if reverse else pipe.zrange)(lists[index], first, last)
            pages = pipe.execute()
        return [ops.text(i) for page in pages for i in page]

    def find(self, field: str, value: str | int, *, limit: int = 100) -> list[Job]:
        """Jobs enqueued with `index={field: value}` (or by a task that declares
        `field` indexed), newest first — read from an index, never a scan."""
        key = self.core.index_key(field, value)
        with translated():
            ids = [ops.text(i) for i in self.client.zrevrange(key, 0, limit - 1)]
            pipe = self.client.pipeline(transaction=False)
            pipe.time()
            for job_id in ids:
                pipe.hgetall(self.core.keys.job(job_id))
            clock, *raws = pipe.execute()
        now_ms = server_ms(clock)
        jobs = [self.core.job(i, raw, now_ms) for i, raw in zip(ids, raws, strict=True)]
        return [job for job in jobs if job is not None]

    def groups(self) -> list[str]:
        """Groups with waiting jobs, those held back (paused, at a limit) included."""
        keys = self.core.keys
        with translated():
            names = [*self.client.zrange(keys.groups, 0, -1)]
            names += [*self.client.zrange(keys.gwait, 0, -1)]
        return sorted({ops.text(n) for n in names})

    def workers(self) -> list[WorkerInfo]:
        """The roll call: workers that sent a heartbeat within their TTL."""
        with translated():
            ids = self.client.zrange(self.core.keys.workers, 0, -1)
            infos = (
                self.client.mget([self.core.keys.worker(ops.text(i)) for i in ids]) if ids else []
            )
        return self.core.workers(ids, infos)

    # --- metrics history and job logs (conveyor.metrics) ---------------------------

    def metrics_history(self, *, minutes: int = 60) -> list[MinuteCounts]:
        """Jobs completed, failed and retried per minute over the last
        `minutes` (at most a week), oldest first, minutes without any as zeros."""
        check_window(minutes, "minutes", WEEK_MINUTES)
        with translated():
            now_ms, hours, keys = self.core.history_keys(self.client.time(), minutes)
            raws = self._hgetall_all(keys)
        return self.core.history(now_ms, minutes, hours, raws)

    def task_timings(self, *, hours: int = 1) -> list[TaskTimings]:
        """Run and wait time histograms per task, added up over the hourly
        buckets that cover the last `hours` hours (at most a week)."""
        check_window(hours, "hours", WEEK_MINUTES // 60)
        with translated():
            raws = self._hgetall_all(self.core.timings_keys(self.client.time(), hours))
        return self.core.timings(raws)

    def totals(self) -> dict[str, int]:
        """Jobs completed, failed, retried and stalled since the queue began."""
        with translated():
            return self.core.totals(self.client.hgetall(self.core.keys.totals))

    def job_log(self, job_id: str) -> list[str]:
        """The lines a job's handler wrote with `current_job().log(...)`."""
        key = self.core.log_key(job_id)
        with translated():
            return [ops.text(line) for line in self.client.lrange(key, 0, -1)]

    def _hgetall_all(self, keys: list[str]) -> list[Any]:
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.hgetall(key)
        return list(pipe.execute())

    def events(
        self, *, after: str = "$", block: float | None = None, count: int = 100
    ) -> list[Event]:
        """Events after stream id `after`, waiting up to `block` seconds for one: the
        next `count` stream entries, one event per job (an entry may name several)."""
        with translated():
            reply = self.client.xread(
                {self.core.keys.events: after},
                count=count,
                block=None
                if block is None
                else round(1000 * block_slice(self._pool_options, block)),
            )
        return decode_events(reply)

    def iter_events(self, *, after: str = "$", block: float = 5.0) -> Iterator[Event]:
        """Follow the events stream forever (blocking reads, no polling)."""
        while True:
            for event in self.events(after=after, block=block):
                after = event.stream_id
                yield event

    # --- operating (the dashboard and the operator's CLI) ----------------------

    def known_queues(self) -> list[str]:
        """Names of the queues clients have used under this queue's key prefix
        (registered by each client's first check; not on a Redis Cluster)."""
        with translated():
            names = self.client.smembers(queue_registry(self.core.settings.prefix))
        return sorted(ops.text(n) for n in names)

    def overview(self) -> inspect.QueueOverview:
        """Counts, paused state, limits and groups in two round trips."""
        keys = self.core.keys
        pairs = self.core.count_keys()
        with translated():
            pipe = self.client.pipeline(transaction=False)
            pipe.hgetall(keys.meta)
            pipe.zrange(keys.groups, 0, -1)
            pipe.zrange(keys.gwait, 0, -1)
            pipe.hgetall(keys.gactive)
            pipe.time()
            meta, groups, held, running, clock = pipe.execute()
            names = inspect.group_names(groups, held)
            pipe = self.client.pipeline(transaction=False)
            for key, since in self.core.count_keys_at([], server_ms(clock)):
                if since is None:
                    pipe.zcard(key)
                else:  # finished jobs count while retained (§4.4)
                    pipe.zcount(key, since, "+inf")
            for group in names:
                pipe.zcard(keys.group_ready(group))
            for group in names[: inspect.MAX_GROUPS_SHOWN]:
                pipe.hgetall(keys.group_conf(group))
            cards_and_replies = pipe.execute()
        cards, replies = cards_and_replies[: len(pairs) + 1], cards_and_replies[len(pairs) + 1 :]
        counts = self.core.counts_from(0, cards)
        waiting, confs = replies[: len(names)], replies[len(names) :]
        return inspect.overview(self.name, meta, counts, names, waiting, running, confs)

    def get_many(self, job_ids: Sequence[str], *, blocked: bool = False) -> list[Job | None]:
        """The jobs of `job_ids` in one round trip (None where a record is gone);
        with `blocked`, their blocked twins (get_blocked) instead."""
        if blocked:
            return self._twins(job_ids)
        keys = [self.core.job_key(i) for i in job_ids]
        with translated():
            pipe = self.client.pipeline(transaction=False)
            pipe.time()
            for key in keys:
                pipe.hgetall(key)
            clock, *raws = pipe.execute()
        now_ms = server_ms(clock)
        return [self.core.job(i, raw, now_ms) for i, raw in zip(job_ids, raws, strict=True)]

    def job_events(self, job_id: str, *, scan: int = inspect.EVENTS_SCANNED) -> list[Event]:
        """A job's events among the last `scan` of the queue's stream, oldest first."""
        job_id = check_job_id(job_id)
        with translated():
            entries = self.client.xrevrange(self.core.keys.events, count=scan)
        return inspect.job_events(job_id, entries)

    def retry_failed(self, *, batch: int = 500) -> int:
        """Retry every failed job, `batch` per round trip; returns how many."""
        return self._drain(self.core.keys.failed, "retry", 1, inspect.check_batch(batch))

    def promote_all(self, *, batch: int = 500) -> int:
        """Run every delayed job now, `batch` per round trip; returns how many."""
        key = self.core.index_of(JobState.DELAYED)
        return self._drain(key, "promote", 1, inspect.check_batch(batch))

    def purge(self, state: JobState | str, *, batch: int = 500) -> int:
        """Remove every job in `state` (waiting, delayed, completed or failed;
        waiting covers every group), `batch` per round trip; returns how many."""
        found, batch = inspect.purge_state(state), inspect.check_batch(batch)
        keys = [self.core.index_of(found)]
        if found is JobState.WAITING:
            keys += [self.core.index_of(found, g) for g in self.groups()]
        return sum(self._drain(key, "remove", "removed", batch) for key in keys)

    def _drain(self, key: str, what: str, done: Any, batch: int) -> int:
        """Apply control `what` to the ids of index `key` up to its last score
        now, page by page; ids the control leaves in place are stepped over by
        offset, and ids that come back (a retried job failing again at once)
        score later, so the walk ends."""
        with translated():
            last = self.client.zrange(key, -1, -1, withscores=True)
        if not last:
            return 0
        top, total, offset = last[0][1], 0, 0
        while True:
            with translated():
                page = self.client.zrangebyscore(key, "-inf", top, start=offset, num=batch)
            ids = [ops.text(i) for i in page]
            if not ids:
                return total
            raw = self._send([self.core.control_call(what, i) for i in ids])
            replies = [ops.word(r) if isinstance(r, bytes | str) else r for r in raw]
            if any(isinstance(r, bytes | str) and ops.marked(r) for r in raw):
                self._carry()  # flow nodes removed: their hand-offs go now
            moved = sum(1 for r in replies if r == done)
            total += moved
            offset += len(ids) - moved

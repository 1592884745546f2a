"""Every Redis key of a queue, in one place.

All keys share the hash tag `{<queue>}` so a queue lives in one Redis Cluster
slot and every script touches a single slot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PROTOCOL_VERSION = 4

# Names end up inside key names: no separators, braces, globs or whitespace.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")
# Ids are the caller's: printable ASCII without spaces, at most 256 bytes.
# ':' '{' '}' '*' are allowed: they follow the queue's tag and a fixed
# `job:` prefix, so they can neither move the slot nor collide with other keys.
ID_PATTERN = re.compile(r"[\x21-\x7e]{1,256}")


def queue_registry(prefix: str) -> str:
    """Set: the names of the queues clients have used under `prefix` (read by
    the dashboard and `conveyor queues`; outside any queue's hash tag)."""
    return f"{prefix}:queues"


# What an operator may write to a worker's wake key (docs/protocol.md §8.3).
WORKER_COMMANDS = ("quiet", "stop")

# A queue's failure lane: the jobs of its failure handlers, in the same slot.
FAILURE_LANE = "failures"


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """Key names of one queue: `<prefix>:{<queue>}:<suffix>`, or of its
    failure lane: `<prefix>:{<queue>}:failures:<suffix>`."""

    prefix: str
    queue: str
    lane: str = ""

    @property
    def base(self) -> str:
        lane = f"{self.lane}:" if self.lane else ""
        return f"{self.prefix}:{{{self.queue}}}:{lane}"

    @property
    def failure_tasks(self) -> str:
        """Set: task names that have a failure handler (registered by workers)."""
        return self.base + "failure_tasks"

    @property
    def meta(self) -> str:
        return self.base + "meta"

    @property
    def ready(self) -> str:
        return self.base + "ready"

    @property
    def scheduled(self) -> str:
        return self.base + "scheduled"

    @property
    def active(self) -> str:
        return self.base + "active"

    @property
    def completed(self) -> str:
        return self.base + "completed"

    @property
    def failed(self) -> str:
        return self.base + "failed"

    @property
    def blocked(self) -> str:
        return self.base + "blocked"

    @property
    def marker(self) -> str:
        return self.base + "marker"

    @property
    def events(self) -> str:
        return self.base + "events"

    @property
    def groups(self) -> str:
        """Groups with ready jobs that may run, scored by last service (round robin)."""
        return self.base + "groups"

    @property
    def gwait(self) -> str:
        """Groups held back (paused, at a limit), scored by when to look again."""
        return self.base + "gwait"

    @property
    def gactive(self) -> str:
        """Hash: group -> jobs of the group running now."""
        return self.base + "gactive"

    def group_ready(self, group: str) -> str:
        return self.base + "gready:" + group

    def group_conf(self, group: str) -> str:
        return self.base + "gconf:" + group

    def index(self, field: str, value: str) -> str:
        """Zset of the ids of jobs enqueued with index {field: value}, by created_at."""
        return self.base + "idx:" + field + ":" + value

    @property
    def schedules(self) -> str:
        """Schedule ids by the tick of their pending job."""
        return self.base + "schedules"

    def schedule(self, schedule_id: str) -> str:
        return self.base + "schedule:" + schedule_id

    @property
    def consumers(self) -> str:
        """Hash: registered events readers -> the last stream id each has read."""
        return self.base + "consumers"

    @property
    def workers(self) -> str:
        return self.base + "workers"

    def job(self, job_id: str) -> str:
        return self.base + "job:" + job_id

    def blocked_job(self, job_id: str) -> str:
        return self.base + "blocked:" + job_id

    def done(self, job_id: str) -> str:
        return self.base + "done:" + job_id

    def worker(self, worker_id: str) -> str:
        return self.base + "worker:" + worker_id

    def metrics(self, hour: int) -> str:
        """Hash: minute of the hour -> "completed failed retried" (§15)."""
        return self.base + "metrics:" + str(hour)

    def timings(self, hour: int) -> str:
        """Hash: run and wait time buckets per task, of one hour (§15)."""
        return self.base + "timings:" + str(hour)

    def timing_max(self, hour: int) -> str:
        """Hash: the largest run and wait time per task, of one hour (§15)."""
        return self.base + "tmax:" + str(hour)

    @property
    def totals(self) -> str:
        """Hash: completed, failed, retried, stalled since the queue began (§15)."""
        return self.base + "totals"

    def job_log(self, job_id: str) -> str:
        """List: the lines a job's handler logged (§15)."""
        return self.base + "log:" + job_id

    # --- flows (docs/protocol.md §14) ---

    @property
    def waiting_children(self) -> str:
        """Zset: ids of parents waiting for their children, by created_at."""
        return self.base + "wchildren"

    @property
    def outbox(self) -> str:
        """Stream: hand-offs from this queue's children to parents in other queues."""
        return self.base + "outbox"

    def children(self, job_id: str) -> str:
        """Zset: every child reference of a parent, scored in the order added."""
        return self.base + "children:" + job_id

    def pending(self, job_id: str) -> str:
        """Set: the child references of a parent that have not settled."""
        return self.base + "pending:" + job_id

    def processed(self, job_id: str) -> str:
        """Hash: child reference -> result JSON, for each child that completed."""
        return self.base + "processed:" + job_id

    def ignored(self, job_id: str) -> str:
        """Hash: child reference -> error, for children that failed under `ignore`."""
        return self.base + "ignored:" + job_id

    def children_failed(self, job_id: str) -> str:
        """Hash: child reference -> error, for children that failed under `fail` / `continue`."""
        return self.base + "cfailed:" + job_id

    def cancelling(self, job_id: str) -> str:
        """Set: the pending children of a cancelled parent, still to be cancelled."""
        return self.base + "cancelling:" + job_id

    @property
    def audit(self) -> str:
        """Stream: operators' actions on this queue, capped (docs/protocol.md §15)."""
        return self.base + "audit"

    def wake(self, worker_id: str) -> str:
        """A worker's own wake-up zset, blocked on beside the marker, so it
        can be woken to stop without cancelling a blocking command."""
        return self.base + "wake:" + worker_id

"""The worker's side of the metrics history (conveyor.metrics): a hook that
counts in memory how long this worker's jobs ran and waited, and a flush on
each heartbeat that adds what grew since the last flush to Redis in one
script call, so the history costs no round trip per job. The outcome counts
(completed, failed, retried, stalled) are not here: the scripts that end the
runs write them (protocol §15), so a worker that dies loses none.

No lock per job: the counters only grow, and have one writer (the job hooks
on the event loop). A flush reads them, sends the difference from what it
sent last, and remembers what it sent only once Redis took it: a flush that
fails leaves its counts to the next one.
"""

from __future__ import annotations

import threading
from bisect import bisect_left

from conveyor import metrics
from conveyor.client.core import QueueCore
from conveyor.client.transport import SyncRunner
from conveyor.hooks import Hook, RunningJob
from conveyor.metrics import BOUNDS
from conveyor.protocol import observe

# task -> counts per run time bucket, the run times' sum in µs, then the same of wait times
Timings = dict[str, list[int]]
SLOTS = len(metrics.BOUNDS) + 2  # buckets, then the sum
RUN_SUM, WAIT0 = SLOTS - 1, SLOTS
WAIT_SUM = 2 * SLOTS - 1


class MetricsRecorder(Hook):
    def __init__(self, core: QueueCore) -> None:
        self.core = core
        self._flushing = threading.Lock()  # the last flush at shutdown may meet a beat's
        # written on the event loop
        self._timings: Timings = {}
        # task -> the largest run and wait time (µs) since the last flush, which sends them
        self._largest: dict[str, list[int]] = {}
        self._sent: Timings = {}  # what the flushes sent

    # --- hooks (event loop) ------------------------------------------------------------

    def after_success(self, job: RunningJob, *, duration: float) -> None:
        # the wait is counted with the run's end: one hook call less per job
        counts = self._timings.get(job.task) or self._add_task(job.task)
        counts[bisect_left(BOUNDS, duration)] += 1
        run_us = int(duration * 1e6)
        counts[RUN_SUM] += run_us
        largest = self._largest.get(job.task)
        if largest is None:
            largest = self._largest[job.task] = [0, -1]
        if run_us > largest[0]:
            largest[0] = run_us
        waited = job.waited
        if waited is not None:
            counts[WAIT0 + bisect_left(BOUNDS, waited)] += 1
            wait_us = int(waited * 1e6)
            counts[WAIT_SUM] += wait_us
            if wait_us > largest[1]:
                largest[1] = wait_us

    def after_failure(
        self, job: RunningJob, exc: BaseException | None, *, error: str, duration: float
    ) -> None:
        self.after_success(job, duration=duration)

    def _add_task(self, task: str) -> list[int]:
        counts: list[int] = [0] * (2 * SLOTS)
        self._timings[task] = counts
        return counts

    # --- the flush (heartbeat thread; once more at shutdown) -----------------------------

    def flush(self, runner: SyncRunner) -> None:
        """Add what was counted since the last flush to Redis."""
        with self._flushing:
            # list() of a dict's items runs in C without releasing the GIL: safe
            # while the event loop adds a task
            timings = {task: list(counts) for task, counts in list(self._timings.items())}
            # a run ending during the swap may miss this window's maximum: the count is exact
            largest, self._largest = self._largest, {}
            fields = _fields(timings, self._sent) | _maxima(largest)
            if not fields:
                return
            call = observe.record_metrics(
                self.core.keys, timings=fields, retention_ms=metrics.RETENTION_MS
            )
            try:
                runner.run(call)
            except BaseException:
                self._keep_largest(largest)  # for the next flush
                raise
            self._sent = timings

    def _keep_largest(self, largest: dict[str, list[int]]) -> None:
        for task, (run_us, wait_us) in largest.items():
            now = self._largest.setdefault(task, [0, -1])
            now[0], now[1] = max(now[0], run_us), max(now[1], wait_us)


def _fields(timings: Timings, sent: Timings) -> dict[str, int]:
    """The timings fields of docs/protocol.md §15 that grew: `<kind><bucket>:<task>`
    counts and `<kind>s:<task>` sums in µs."""
    fields = {}
    for task, counts in timings.items():
        before = sent.get(task, [0] * (2 * SLOTS))
        for kind, first in ((metrics.RUN, 0), (metrics.WAIT, WAIT0)):
            for bucket in range(SLOTS - 1):
                grew = counts[first + bucket] - before[first + bucket]
                if grew > 0:
                    fields[f"{kind}{bucket}:{task}"] = grew
            grew = counts[first + SLOTS - 1] - before[first + SLOTS - 1]
            if grew > 0:
                fields[f"{kind}s:{task}"] = grew
    return fields


def _maxima(largest: dict[str, list[int]]) -> dict[str, int]:
    """The `max/<kind>:<task>` fields of docs/protocol.md §15: the largest run and
    wait time (µs) of the window, which record_metrics keeps if larger than the hour's."""
    fields = {}
    for task, (run_us, wait_us) in largest.items():
        fields[f"max/{metrics.RUN}:{task}"] = run_us
        if wait_us >= 0:
            fields[f"max/{metrics.WAIT}:{task}"] = wait_us
    return fields

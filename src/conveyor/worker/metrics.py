"""The worker's side of the metrics history (conveyor.metrics): a hook that
counts in memory what this worker's jobs did, and a flush on each heartbeat
that adds what grew since the last flush to Redis in one script call, so the
history costs no round trip per job.

No lock per job: the counters only grow, and each has one writer (the job
hooks on the event loop; the reaper's report on the heartbeat thread). A
flush reads them, sends the difference from what it sent last, and
remembers what it sent only once Redis took it: a flush that fails leaves
its counts to the next one.
"""

from __future__ import annotations

import bisect
import threading

from conveyor import metrics
from conveyor.client.core import QueueCore
from conveyor.client.transport import SyncRunner
from conveyor.hooks import Hook, RunningJob
from conveyor.protocol import observe

Timings = dict[tuple[str, str], list[int]]  # (kind, task) -> counts per bucket, then µs
SLOTS = len(metrics.BOUNDS) + 2


class MetricsRecorder(Hook):
    def __init__(self, core: QueueCore) -> None:
        self.core = core
        self._flushing = threading.Lock()  # the last flush at shutdown may meet a beat's
        # written on the event loop
        self._outcomes = [0, 0, 0]  # completed, failed, retried
        self._timings: Timings = {}
        # written on the heartbeat thread
        self._reaped = [0, 0]  # recovered, failed
        # what the flushes sent
        self._sent: tuple[list[int], list[int], Timings] = ([0, 0, 0], [0, 0], {})

    # --- hooks (event loop, but on_stalled) --------------------------------------------

    def before_run(self, job: RunningJob) -> None:
        if job.waited is not None:
            self._time(metrics.WAIT, job.task, job.waited)

    def after_success(self, job: RunningJob, *, duration: float) -> None:
        self._time(metrics.RUN, job.task, duration)

    def after_failure(
        self, job: RunningJob, exc: BaseException | None, *, error: str, duration: float
    ) -> None:
        self._time(metrics.RUN, job.task, duration)

    def on_completed(self, job: RunningJob) -> None:
        self._outcomes[0] += 1

    def on_final_failure(self, job: RunningJob, *, error: str) -> None:
        self._outcomes[1] += 1

    def on_retry(self, job: RunningJob, *, error: str) -> None:
        self._outcomes[2] += 1

    def on_stalled(self, *, recovered: int, failed: int) -> None:  # heartbeat thread
        self._reaped[0] += recovered
        self._reaped[1] += failed

    def _time(self, kind: str, task: str, seconds: float) -> None:
        counts = self._timings.get((kind, task))
        if counts is None:
            counts = self._timings[(kind, task)] = [0] * SLOTS
        counts[bisect.bisect_left(metrics.BOUNDS, seconds)] += 1
        counts[-1] += int(seconds * 1e6)

    # --- the flush (heartbeat thread; once more at shutdown) -----------------------------

    def flush(self, runner: SyncRunner) -> None:
        """Add what was counted since the last flush to Redis."""
        with self._flushing:
            outcomes, reaped = list(self._outcomes), list(self._reaped)
            # list() of a dict's items runs in C without releasing the GIL: safe
            # while the event loop adds a task
            timings = {key: list(counts) for key, counts in list(self._timings.items())}
            sent_outcomes, sent_reaped, sent_timings = self._sent
            done, failed, retried = (a - b for a, b in zip(outcomes, sent_outcomes, strict=True))
            recovered, stalled_out = (a - b for a, b in zip(reaped, sent_reaped, strict=True))
            fields = _fields(timings, sent_timings)
            if not (done or failed or retried or recovered or stalled_out or fields):
                return
            call = observe.record_metrics(
                self.core.keys,
                completed=done,
                failed=failed + stalled_out,
                retried=retried + recovered,
                stalled=recovered + stalled_out,
                timings=fields,
                retention_ms=metrics.RETENTION_MS,
            )
            runner.run(call)
            self._sent = (outcomes, reaped, timings)


def _fields(timings: Timings, sent: Timings) -> dict[str, int]:
    """The timings fields of docs/protocol.md §15 that grew: `<kind><bucket>:<task>`
    counts and `<kind>s:<task>` sums in µs."""
    fields = {}
    for (kind, task), counts in timings.items():
        before = sent.get((kind, task), [0] * SLOTS)
        for bucket in range(SLOTS - 1):
            if counts[bucket] > before[bucket]:
                fields[f"{kind}{bucket}:{task}"] = counts[bucket] - before[bucket]
        if counts[-1] > before[-1]:
            fields[f"{kind}s:{task}"] = counts[-1] - before[-1]
    return fields

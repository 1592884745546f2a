"""The worker's side of the metrics history (conveyor.metrics): a hook that
counts in memory what this worker's jobs did, and a flush on each heartbeat
that adds the counts to Redis in one script call, so the history costs no
round trip per job.

The hooks run on the event loop, the flush and the reaper's report on the
heartbeat thread: a lock guards the counts. A flush that fails keeps its
counts for the next one.
"""

from __future__ import annotations

import threading

from conveyor import metrics
from conveyor.client.core import QueueCore
from conveyor.client.transport import SyncRunner
from conveyor.hooks import Hook, RunningJob
from conveyor.protocol import observe


class MetricsRecorder(Hook):
    def __init__(self, core: QueueCore) -> None:
        self.core = core
        self._lock = threading.Lock()
        self._completed = self._failed = self._retried = self._stalled = 0
        self._timings: dict[str, int] = {}

    # --- hooks (event loop) ----------------------------------------------------------

    def before_run(self, job: RunningJob) -> None:
        if job.waited is not None:
            with self._lock:
                self._time(metrics.WAIT, job.task, job.waited)

    def after_success(self, job: RunningJob, *, duration: float) -> None:
        with self._lock:
            self._time(metrics.RUN, job.task, duration)

    def after_failure(
        self, job: RunningJob, exc: BaseException | None, *, error: str, duration: float
    ) -> None:
        with self._lock:
            self._time(metrics.RUN, job.task, duration)

    def on_completed(self, job: RunningJob) -> None:
        with self._lock:
            self._completed += 1

    def on_retry(self, job: RunningJob, *, error: str) -> None:
        with self._lock:
            self._retried += 1

    def on_final_failure(self, job: RunningJob, *, error: str) -> None:
        with self._lock:
            self._failed += 1

    def on_stalled(self, *, recovered: int, failed: int) -> None:  # heartbeat thread
        with self._lock:
            self._stalled += recovered + failed
            self._retried += recovered
            self._failed += failed

    def _time(self, kind: str, task: str, seconds: float) -> None:
        timings = self._timings
        bucket = f"{kind}{metrics.bucket_of(seconds)}:{task}"
        timings[bucket] = timings.get(bucket, 0) + 1
        total = f"{kind}s:{task}"
        timings[total] = timings.get(total, 0) + round(seconds * 1e6)

    # --- the flush (heartbeat thread) ------------------------------------------------

    def flush(self, runner: SyncRunner) -> None:
        """Add what was counted since the last flush to Redis."""
        with self._lock:
            counts = (self._completed, self._failed, self._retried, self._stalled)
            timings, self._timings = self._timings, {}
            self._completed = self._failed = self._retried = self._stalled = 0
        if not any(counts) and not timings:
            return
        call = observe.record_metrics(
            self.core.keys,
            completed=counts[0],
            failed=counts[1],
            retried=counts[2],
            stalled=counts[3],
            timings=timings,
            retention_ms=metrics.RETENTION_MS,
        )
        try:
            runner.run(call)
        except BaseException:
            self._give_back(counts, timings)
            raise

    def _give_back(self, counts: tuple[int, int, int, int], timings: dict[str, int]) -> None:
        with self._lock:
            self._completed += counts[0]
            self._failed += counts[1]
            self._retried += counts[2]
            self._stalled += counts[3]
            for name, n in timings.items():
                self._timings[name] = self._timings.get(name, 0) + n

"""Prometheus metrics (the `prometheus` extra: prometheus-client).

Two sources, two places:

- A worker's own counts, from its hooks (PrometheusHook): jobs completed,
  failed for good and retried, by task; run and wait time histograms by
  task; stalled jobs its reaper found; leases it lost. Served by
  `conveyor worker --metrics-port PORT` (worker_endpoint), one scrape target
  per worker process, as Prometheus counts processes.
- A queue's state, read from Redis at each scrape (QueueCollector, and the
  async metrics_app): jobs by state, live workers, and the queue's totals
  since it began (completed, failed, retried, stalled: docs/protocol.md §15).
  The worker endpoint serves them too; `metrics_app(queues)` is an ASGI app
  for `/metrics` of a web app (the dashboard mounts it).

| metric | type | labels |
|---|---|---|
| conveyor_worker_jobs_total | counter | queue, task, outcome (completed, failed, retried) |
| conveyor_job_run_seconds | histogram | queue, task |
| conveyor_job_wait_seconds | histogram | queue, task (first attempts: enqueue to start) |
| conveyor_worker_stalled_total | counter | queue |
| conveyor_worker_lease_losses_total | counter | queue |
| conveyor_queue_jobs | gauge | queue, state |
| conveyor_queue_live_workers | gauge | queue |
| conveyor_queue_outcomes_total | counter | queue, outcome (completed, failed, retried, stalled) |
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from conveyor import metrics
from conveyor.client.aio import AsyncQueue
from conveyor.client.sync import Queue
from conveyor.hooks import Hook, RunningJob
from conveyor.job import JobState


class PrometheusHook(Hook):
    """A worker's own counts, in `registry`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        buckets = (*metrics.BOUNDS, float("inf"))
        self.jobs = Counter(
            "conveyor_worker_jobs", "Job outcomes written by this worker.",
            ["queue", "task", "outcome"], registry=registry,
        )  # fmt: skip
        self.run = Histogram(
            "conveyor_job_run_seconds", "Handler run time.", ["queue", "task"],
            buckets=buckets, registry=registry,
        )  # fmt: skip
        self.wait = Histogram(
            "conveyor_job_wait_seconds", "From enqueue to start, first attempts.",
            ["queue", "task"], buckets=buckets, registry=registry,
        )  # fmt: skip
        self.stalled = Counter(
            "conveyor_worker_stalled", "Expired leases this worker's reaper found.", ["queue"],
            registry=registry,
        )  # fmt: skip
        self.lost = Counter(
            "conveyor_worker_lease_losses", "Leases this worker lost.", ["queue"],
            registry=registry,
        )  # fmt: skip
        self._queue = ""

    def worker_start(self, worker_id: str, queue: str) -> None:
        self._queue = queue

    def before_run(self, job: RunningJob) -> None:
        if job.waited is not None:
            self.wait.labels(job.queue, job.task).observe(job.waited)

    def after_success(self, job: RunningJob, *, duration: float) -> None:
        self.run.labels(job.queue, job.task).observe(duration)

    def after_failure(
        self, job: RunningJob, exc: BaseException | None, *, error: str, duration: float
    ) -> None:
        self.run.labels(job.queue, job.task).observe(duration)

    def on_completed(self, job: RunningJob) -> None:
        self.jobs.labels(job.queue, job.task, "completed").inc()

    def on_retry(self, job: RunningJob, *, error: str) -> None:
        self.jobs.labels(job.queue, job.task, "retried").inc()

    def on_final_failure(self, job: RunningJob, *, error: str) -> None:
        self.jobs.labels(job.queue, job.task, "failed").inc()

    def on_lease_lost(self, job: RunningJob) -> None:
        self.lost.labels(job.queue).inc()

    def on_stalled(self, *, recovered: int, failed: int) -> None:
        self.stalled.labels(self._queue).inc(recovered + failed)


@dataclass(frozen=True, slots=True)
class QueueState:
    """What a scrape reads of one queue."""

    name: str
    counts: dict[JobState, int]
    live_workers: int
    totals: dict[str, int]


def families(states: Iterable[QueueState]) -> Iterator[Metric]:
    jobs = GaugeMetricFamily("conveyor_queue_jobs", "Jobs by state.", labels=["queue", "state"])
    workers = GaugeMetricFamily(
        "conveyor_queue_live_workers", "Workers in the roll call.", labels=["queue"]
    )
    totals = CounterMetricFamily(
        "conveyor_queue_outcomes",
        "Job outcomes since the queue began, from its metrics history.",
        labels=["queue", "outcome"],
    )
    for state in states:
        for job_state, n in state.counts.items():
            jobs.add_metric([state.name, job_state.value], n)
        workers.add_metric([state.name], state.live_workers)
        for outcome, n in state.totals.items():
            totals.add_metric([state.name, outcome], n)
    yield from (jobs, workers, totals)


class QueueCollector(Collector):
    """The state of some queues, read from Redis at each scrape (sync: for a
    scrape served on its own thread, like the worker endpoint's)."""

    def __init__(self, queues: Sequence[Queue]) -> None:
        self.queues = list(queues)

    def collect(self) -> Iterator[Metric]:
        states = [QueueState(q.name, q.counts(), len(q.workers()), q.totals()) for q in self.queues]
        return families(states)


def worker_endpoint(
    port: int, queue: Queue | Sequence[Queue], *, addr: str = "0.0.0.0"
) -> PrometheusHook:
    """Serve a worker's metrics and its queue's (or queues') on `port` (a
    thread); returns the hook to give the worker."""
    registry = CollectorRegistry()
    hook = PrometheusHook(registry)
    registry.register(QueueCollector([queue] if isinstance(queue, Queue) else list(queue)))
    start_http_server(port, addr=addr, registry=registry)
    return hook


class _Snapshot(Collector):
    def __init__(self, states: list[QueueState]) -> None:
        self.states = states

    def collect(self) -> Iterator[Metric]:
        return families(self.states)


# The queues to report: names or AsyncQueues, or an async callable that lists
# AsyncQueues at each scrape (a dashboard's own, say: they stay the caller's).
QueueSource = Sequence[str | AsyncQueue] | Callable[[], Awaitable[Sequence[AsyncQueue]]]


class MetricsApp:
    """An ASGI app answering every GET with the queues' state in Prometheus's
    text format: mount it at `/metrics`. Queues given by name are opened with
    `url` at the first scrape (on the serving loop) and closed by `close()`
    or the ASGI lifespan's shutdown (a mounted app gets no lifespan events:
    call `close()` from the host app's own); AsyncQueues given, or listed by
    a callable, are the caller's to close."""

    def __init__(self, queues: QueueSource, *, url: str | None = None) -> None:
        self._source = queues if callable(queues) else None
        self._given = [] if callable(queues) else list(queues)
        self._url = url
        self._queues: list[AsyncQueue] = []
        self._owned: list[AsyncQueue] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if scope.get("method", "GET") not in ("GET", "HEAD"):
            await _respond(send, 405, b"method not allowed\n", "text/plain")
            return
        queues = self._opened() if self._source is None else await self._source()
        states = await asyncio.gather(*(_read(q) for q in queues))
        registry = CollectorRegistry()
        registry.register(_Snapshot(list(states)))
        await _respond(send, 200, generate_latest(registry), CONTENT_TYPE_LATEST)

    def _opened(self) -> list[AsyncQueue]:
        if not self._queues:
            for queue in self._given:
                if not isinstance(queue, AsyncQueue):
                    queue = AsyncQueue(queue, url=self._url)
                    self._owned.append(queue)
                self._queues.append(queue)
        return self._queues

    async def close(self) -> None:
        """Close the queues this app opened."""
        owned, self._owned, self._queues = self._owned, [], []
        await asyncio.gather(*(q.close() for q in owned))

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


def metrics_app(queues: QueueSource, *, url: str | None = None) -> MetricsApp:
    """The ASGI `/metrics` app of `queues` (see MetricsApp)."""
    return MetricsApp(queues, url=url)


async def _read(queue: AsyncQueue) -> QueueState:
    counts, workers, totals = await asyncio.gather(queue.counts(), queue.workers(), queue.totals())
    return QueueState(queue.name, counts, len(workers), totals)


async def _respond(send: Any, status: int, body: bytes, content_type: str) -> None:
    headers = [(b"content-type", content_type.encode()), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})

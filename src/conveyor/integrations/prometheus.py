"""Prometheus metrics (the `prometheus` extra: prometheus-client).

Two sources, two places:

- A worker's own counts, from its hooks (PrometheusHook): jobs completed,
  failed for good and retried, by task; run and wait time histograms by
  task; stalled jobs its reaper found; leases it lost. Served by
  `conveyor worker --metrics-port PORT` (worker_endpoint), one scrape target
  per worker process, as Prometheus counts processes. It listens on
  127.0.0.1 unless given another address (`--metrics-host 0.0.0.0` for a
  Prometheus on another host), and answers HEAD like GET, without the body.
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
| conveyor_worker_concurrency | gauge | (none): the jobs it may run at once now |
| conveyor_queue_jobs | gauge | queue, state |
| conveyor_queue_live_workers | gauge | queue |
| conveyor_queue_suspects_running | gauge | queue (suspects the live workers run, each isolated) |
| conveyor_queue_outcomes_total | counter | queue, outcome (completed, failed, retried, stalled) |
| conveyor_queue_oldest_waiting_seconds | gauge | queue (how long the next job has waited) |
| conveyor_queue_completed_per_minute | gauge | queue (over the 5 full minutes before now) |
| conveyor_queue_paused | gauge | queue (1 paused, 0 not) |
| conveyor_queue_busy_slots | gauge | queue (jobs its live workers run) |
| conveyor_queue_slots | gauge | queue (its live workers' concurrency) |

The worker endpoint adds prometheus_client's process collector
(process_resident_memory_bytes, process_cpu_seconds_total, ...), and its
counters start at zero for each queue (and, given `tasks`, each task) it serves.

Every worker and the dashboard export the same queue gauges (conveyor_queue_*):
aggregate them with `max by (queue, ...)`, never `sum` (deploy/grafana and
deploy/prometheus do), or scrape them from one target only.
"""

from __future__ import annotations

__all__ = ["MetricsApp", "PrometheusHook", "metrics_app", "worker_endpoint"]

import asyncio
import io
import socket
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, MetricsHandler, generate_latest
from prometheus_client.registry import Collector

from conveyor import metrics
from conveyor.client.aio import AsyncQueue
from conveyor.client.models import WorkerInfo
from conveyor.client.sync import Queue
from conveyor.hooks import Hook, RunningJob
from conveyor.job import JobState

OUTCOMES = ("completed", "failed", "retried")


class PrometheusHook(Hook):
    """A worker's own counts, in `registry`; `tasks` (queue -> task names)
    start at zero, so a rate or an alert sees the series before the first job."""

    def __init__(
        self, registry: CollectorRegistry, tasks: Mapping[str, Sequence[str]] | None = None
    ) -> None:
        self.registry = registry
        buckets = (*metrics.PROMETHEUS_BOUNDS, float("inf"))
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
        for queue, names in (tasks or {}).items():
            self.stalled.labels(queue)
            self.lost.labels(queue)
            for task in names:
                for outcome in OUTCOMES:
                    self.jobs.labels(queue, task, outcome)

    def watch_concurrency(self, limit: Callable[[], int]) -> None:
        """Export the worker's concurrency limit, read at each scrape (it
        moves under `--concurrency auto`): `limit` is `Worker.concurrency`."""
        gauge = Gauge(
            "conveyor_worker_concurrency", "Jobs this worker may run at once now.",
            registry=self.registry,
        )  # fmt: skip
        gauge.set_function(limit)

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

    def on_stalled(self, *, recovered: int, failed: int, queue: str) -> None:
        self.stalled.labels(queue).inc(recovered + failed)


@dataclass(frozen=True, slots=True)
class QueueState:
    """What a scrape reads of one queue."""

    name: str
    counts: dict[JobState, int]
    live_workers: int
    totals: dict[str, int]
    suspects: int = 0  # running on its live workers (roll call `suspects`)
    latency: float | None = None
    per_minute: float = 0.0
    paused: bool = False
    busy_slots: int = 0
    slots: int = 0


def _gauge(name: str, text: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, labels=["queue"])


def slots_of(workers: Sequence[WorkerInfo]) -> tuple[int, int]:
    """Jobs the live workers run and their concurrency, from their roll call."""
    busy = sum(_number(w.info.get("running")) for w in workers)
    return busy, sum(_number(w.info.get("concurrency")) for w in workers)


def shown_name(queue: Queue | AsyncQueue) -> str:
    """The queue's name in labels and the dashboard: its failure lane's is `<name>:failures`."""
    return f"{queue.name}:failures" if queue.core.failures else queue.name


def _number(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def families(states: Iterable[QueueState]) -> Iterator[Metric]:
    jobs = GaugeMetricFamily("conveyor_queue_jobs", "Jobs by state.", labels=["queue", "state"])
    workers = GaugeMetricFamily(
        "conveyor_queue_live_workers", "Workers in the roll call.", labels=["queue"]
    )
    suspects = GaugeMetricFamily(
        "conveyor_queue_suspects_running",
        "Suspects (jobs whose last worker died with them) running, each in a child of its own.",
        labels=["queue"],
    )
    totals = CounterMetricFamily(
        "conveyor_queue_outcomes",
        "Job outcomes since the queue began, from its metrics history.",
        labels=["queue", "outcome"],
    )
    latency = _gauge(
        "conveyor_queue_oldest_waiting_seconds",
        "How long the next waiting job has been due (0: none waits).",
    )
    throughput = _gauge(
        "conveyor_queue_completed_per_minute",
        "Jobs completed per minute, over the 5 full minutes before now.",
    )
    paused = _gauge("conveyor_queue_paused", "1 when the queue is paused.")
    busy = _gauge("conveyor_queue_busy_slots", "Jobs the queue's live workers run.")
    slots = _gauge("conveyor_queue_slots", "The concurrency of the queue's live workers.")
    for state in states:
        for job_state, n in state.counts.items():
            jobs.add_metric([state.name, job_state.value], n)
        workers.add_metric([state.name], state.live_workers)
        suspects.add_metric([state.name], state.suspects)
        for outcome, n in state.totals.items():
            totals.add_metric([state.name, outcome], n)
        latency.add_metric([state.name], state.latency or 0.0)
        throughput.add_metric([state.name], state.per_minute)
        paused.add_metric([state.name], 1 if state.paused else 0)
        busy.add_metric([state.name], state.busy_slots)
        slots.add_metric([state.name], state.slots)
    yield from (jobs, workers, suspects, totals, latency, throughput, paused, busy, slots)


class QueueCollector(Collector):
    """The state of some queues, read from Redis at each scrape (sync: for a
    scrape served on its own thread, like the worker endpoint's)."""

    def __init__(self, queues: Sequence[Queue]) -> None:
        self.queues = list(queues)

    def collect(self) -> Iterator[Metric]:
        return families([_read_sync(q) for q in self.queues])


def _read_sync(queue: Queue) -> QueueState:
    workers = queue.workers()
    busy, slots = slots_of(workers)
    history = queue.metrics_history(minutes=metrics.THROUGHPUT_MINUTES + 1)
    return QueueState(
        shown_name(queue), queue.counts(), len(workers), queue.totals(), latency=queue.latency(),
        per_minute=metrics.per_minute(history), paused=queue.overview().paused,
        busy_slots=busy, slots=slots, suspects=_suspects(workers),
    )  # fmt: skip


def worker_endpoint(
    port: int,
    queue: Queue | Sequence[Queue],
    *,
    addr: str = "127.0.0.1",
    tasks: Mapping[str, Sequence[str]] | None = None,
) -> PrometheusHook:
    """Serve a worker's metrics, its process's and its queue's (or queues')
    on `addr`:`port` (a thread; "0.0.0.0" or "::" for every interface);
    returns the hook to give the worker. `tasks` (queue -> task names) start
    their counters at zero."""
    registry = CollectorRegistry()
    hook = PrometheusHook(registry, tasks)
    # the process's RSS, CPU, open files: what prometheus_client's default registry has
    ProcessCollector(registry=registry)
    registry.register(QueueCollector([queue] if isinstance(queue, Queue) else list(queue)))
    serve(registry, port, addr)
    return hook


class _Handler(MetricsHandler):
    """prometheus_client's handler (content negotiation, gzip), and HEAD: a
    probe or a load balancer's check gets the GET's status and headers."""

    def do_HEAD(self) -> None:
        buffer = io.BytesIO()
        sent, self.wfile = self.wfile, buffer
        try:
            self.do_GET()
        finally:
            self.wfile = sent
        self.wfile.write(buffer.getvalue().partition(b"\r\n\r\n")[0] + b"\r\n\r\n")


def serve(registry: CollectorRegistry, port: int, addr: str) -> ThreadingHTTPServer:
    """Serve `registry` at http://addr:port/ (any path) on a daemon thread."""
    family = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)[0][0]
    server_class = type("MetricsServer", (ThreadingHTTPServer,), {"address_family": family})
    server: ThreadingHTTPServer = server_class((addr, port), _Handler.factory(registry))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


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
    counts, workers, totals, latency, history, seen = await asyncio.gather(
        queue.counts(), queue.workers(), queue.totals(), queue.latency(),
        queue.metrics_history(minutes=metrics.THROUGHPUT_MINUTES + 1), queue.overview(),
    )  # fmt: skip
    busy, slots = slots_of(workers)
    return QueueState(
        shown_name(queue), counts, len(workers), totals, latency=latency,
        per_minute=metrics.per_minute(history), paused=seen.paused, busy_slots=busy, slots=slots,
        suspects=_suspects(workers),
    )  # fmt: skip


def _suspects(workers: Sequence[WorkerInfo]) -> int:
    return sum(len(w.info.get("suspects", ())) for w in workers)


async def _respond(send: Any, status: int, body: bytes, content_type: str) -> None:
    headers = [(b"content-type", content_type.encode()), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})

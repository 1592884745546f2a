"""OpenTelemetry tracing (the `otel` extra: opentelemetry-api and -sdk).

    from conveyor.integrations.otel import TracingHook
    tasks = Tasks("emails", settings=QueueSettings(hooks=(TracingHook(),)))

Producers then wrap each enqueue in a PRODUCER span `send <queue> <task>`, whose
context travels in the job record (the W3C `traceparent` / `tracestate`
headers, docs/protocol.md §15), and workers wrap each run in a CONSUMER span
`process <queue> <task>`, a child of that producer span (and linked to it), current
while the handler runs: its own spans nest under it. Attributes follow the
messaging semantic conventions (messaging.system, messaging.operation.type /
.name, messaging.destination.name, messaging.message.id, messaging.client.id)
plus conveyor.task and conveyor.job.attempt. A failed run records its
exception and sets the span's status to ERROR.

Spans go to the tracer provider given, or the global one: configure an SDK
TracerProvider with an exporter in the producer and in the worker process.
"""

from __future__ import annotations

import threading
from contextvars import Token
from typing import Any

from opentelemetry import context, propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from conveyor.hooks import Hook, RunningJob

SYSTEM = "conveyor"


class TracingHook(Hook):
    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self.tracer = trace.get_tracer("conveyor", tracer_provider=tracer_provider)
        self._provider = tracer_provider
        self._lock = threading.Lock()  # producers may share the hook across threads
        self._sending: dict[str, trace.Span] = {}  # traceparent -> its producer span
        self._running: dict[int, tuple[trace.Span, Token[Context]]] = {}  # id(job) -> ...

    # --- producers -------------------------------------------------------------------------

    def before_enqueue(self, queue: str, task: str, data: Any, options: dict[str, Any]) -> None:
        span = self.tracer.start_span(
            f"send {queue} {task}",
            kind=SpanKind.PRODUCER,
            attributes={
                "messaging.system": SYSTEM,
                "messaging.operation.type": "send",
                "messaging.operation.name": "enqueue",
                "messaging.destination.name": queue,
                "conveyor.task": task,
            },
        )
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        if "traceparent" not in carrier:  # a propagator without W3C trace context
            span.end()
            return
        options["headers"] = {**options.get("headers", {}), **carrier}
        with self._lock:
            self._sending[carrier["traceparent"]] = span

    def after_enqueue(
        self,
        queue: str,
        task: str,
        options: dict[str, Any],
        *,
        job_id: str | None,
        error: BaseException | None,
    ) -> None:
        traceparent = options.get("headers", {}).get("traceparent")
        with self._lock:
            span = self._sending.pop(traceparent, None)
        if span is None:
            return
        if job_id is not None:
            span.set_attribute("messaging.message.id", job_id)
        if error is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        span.end()

    # --- workers (on the event loop, in the runner's context) ------------------------------

    def worker_stop(self, worker_id: str, queue: str) -> None:
        """Export the spans a batch processor still holds: `conveyor worker` ends
        its process without running atexit handlers (a sync handler's thread
        cannot be joined), where the SDK would flush them."""
        provider = self._provider or trace.get_tracer_provider()
        flush = getattr(provider, "force_flush", None)
        if callable(flush):
            flush()

    def before_run(self, job: RunningJob) -> None:
        parent = propagate.extract(job.headers or {})
        sent = trace.get_current_span(parent).get_span_context()
        span = self.tracer.start_span(
            f"process {job.queue} {job.task}",
            context=parent,
            kind=SpanKind.CONSUMER,
            links=[Link(sent)] if sent.is_valid else None,
            attributes={
                "messaging.system": SYSTEM,
                "messaging.operation.type": "process",
                "messaging.operation.name": "run",
                "messaging.destination.name": job.queue,
                "messaging.message.id": job.id,
                "messaging.client.id": job.worker_id,
                "conveyor.task": job.task,
                "conveyor.job.attempt": job.attempt,
            },
        )
        # current while the handler runs: the handler's spans are its children
        token = context.attach(trace.set_span_in_context(span))
        self._running[id(job)] = (span, token)

    def after_success(self, job: RunningJob, *, duration: float) -> None:
        self._end(job, None)

    def after_failure(
        self, job: RunningJob, exc: BaseException | None, *, error: str, duration: float
    ) -> None:
        self._end(job, Status(StatusCode.ERROR, error.partition("\n")[0]), exc)

    def after_stopped(self, job: RunningJob, *, duration: float) -> None:
        self._end(job, Status(StatusCode.ERROR, "stopped: lease lost or given back"))

    def _end(
        self, job: RunningJob, status: Status | None, exc: BaseException | None = None
    ) -> None:
        found = self._running.pop(id(job), None)
        if found is None:
            return
        span, token = found
        if exc is not None:
            span.record_exception(exc)
        if status is not None:
            span.set_status(status)
        span.end()
        context.detach(token)

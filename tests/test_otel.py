"""OpenTelemetry: PRODUCER spans in this process (the SDK's in-memory
exporter), CONSUMER spans in a real worker process (exported as JSON lines
to a file), joined by the trace context that travels in the job record."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from conveyor import Queue
from conveyor.client.models import QueueSettings
from conveyor.integrations.cli import main
from conveyor.integrations.otel import TracingHook
from support.workers import APPS, SRC


def test_a_job_s_trace_runs_from_its_enqueue_into_a_worker_process(
    redis_url: str, queue_name: str, tmp_path: Path
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    settings = QueueSettings(hooks=(TracingHook(provider),))
    with Queue(queue_name, url=redis_url, settings=settings) as queue:
        ok = queue.enqueue("traced", 1)
        ok_sync, bad = queue.enqueue_many([("traced_sync", 2), ("traced_failure", 3)])
    sent = {span.attributes["messaging.message.id"]: span for span in exporter.get_finished_spans()}
    assert set(sent) == {ok.id, ok_sync.id, bad.id}
    producer = sent[ok.id]
    assert producer.name == f"send {queue_name} traced" and producer.kind is SpanKind.PRODUCER
    assert producer.attributes["messaging.system"] == "conveyor"
    assert producer.attributes["messaging.operation.type"] == "send"
    assert producer.attributes["messaging.destination.name"] == queue_name
    assert producer.attributes["conveyor.task"] == "traced"
    # the trace id is on the job record, and in `jobs show --json`
    trace_id = f"{producer.get_span_context().trace_id:032x}"
    with Queue(queue_name, url=redis_url) as plain:
        assert (got := plain.get(ok.id)) is not None and got.trace_id == trace_id
    args = ["jobs", "show", queue_name, ok.id, "--json", "--url", redis_url]
    shown = CliRunner().invoke(main, args)
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["trace_id"] == trace_id

    spans_file = tmp_path / "spans.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "conveyor.integrations.cli", "worker", "otel_app:tasks",
         "--url", redis_url, "--burst"],
        env={"PYTHONPATH": f"{APPS}:{SRC}", "TEST_QUEUE": queue_name, "PATH": "/usr/bin:/bin",
             "TEST_SPANS": str(spans_file)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    consumers = {s["attributes"]["messaging.message.id"]: s for s in spans
                 if s["kind"] == "SpanKind.CONSUMER"}  # fmt: skip
    assert set(consumers) == set(sent)
    for job_id, consumer in consumers.items():
        producer_context = sent[job_id].get_span_context()
        assert consumer["context"]["trace_id"] == f"0x{producer_context.trace_id:032x}"
        assert consumer["parent_id"] == f"0x{producer_context.span_id:016x}"
        assert consumer["links"][0]["context"]["span_id"] == f"0x{producer_context.span_id:016x}"
        attributes: dict[str, Any] = consumer["attributes"]
        task = sent[job_id].attributes["conveyor.task"]
        assert consumer["name"] == f"process {queue_name} {task}"
        assert attributes["messaging.operation.type"] == "process"
        assert attributes["messaging.destination.name"] == queue_name
        assert attributes["conveyor.job.attempt"] == 1
        assert attributes["messaging.client.id"]
    # the handlers' own spans are children of their run's span
    inner = {s["name"]: s for s in spans if s["name"].startswith("inside")}
    assert inner["inside the handler"]["parent_id"] == consumers[ok.id]["context"]["span_id"]
    assert inner["inside the sync handler"]["parent_id"] == (
        consumers[ok_sync.id]["context"]["span_id"]
    )
    assert consumers[ok.id]["status"]["status_code"] == "UNSET"
    failed = consumers[bad.id]
    assert failed["status"]["status_code"] == StatusCode.ERROR.name
    assert "PermanentError: failed on purpose: 3" in failed["status"]["description"]
    assert failed["events"][0]["name"] == "exception"

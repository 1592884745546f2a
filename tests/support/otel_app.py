"""Tasks of the tracing test's worker process: its spans go, one JSON object
per line, to the file named by $TEST_SPANS (queue from $TEST_QUEUE)."""

from __future__ import annotations

import os

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

from conveyor.client.models import QueueSettings
from conveyor.client.tasks import Tasks
from conveyor.errors import PermanentError
from conveyor.integrations.otel import TracingHook

provider = TracerProvider()
spans_file = open(os.environ["TEST_SPANS"], "a")  # noqa: SIM115  # open for the process's life
exporter = ConsoleSpanExporter(
    out=spans_file, formatter=lambda span: span.to_json(indent=None) + "\n"
)
# batched, as in production: exported when the worker stops
provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=60_000))
tracer = provider.get_tracer("otel_app")

tasks = Tasks(
    os.environ.get("TEST_QUEUE", "default"),
    settings=QueueSettings(hooks=(TracingHook(provider),)),
)


@tasks.task
async def traced(data: int) -> int:
    with tracer.start_as_current_span("inside the handler"):
        return data + 1


@tasks.task
def traced_sync(data: int) -> int:
    with tracer.start_as_current_span("inside the sync handler"):
        return data + 2


@tasks.task
async def traced_failure(data: int) -> None:
    raise PermanentError(f"failed on purpose: {data}")


assert trace  # the API module is what handlers would import

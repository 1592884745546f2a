"""Prometheus: scraped over HTTP from a real worker process, and the ASGI
/metrics app read in process."""

from __future__ import annotations

import asyncio
import signal
import socket
import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conveyor import AsyncQueue, Queue
from conveyor.integrations.prometheus import metrics_app
from support.workers import spawn_worker, wait_until


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(found: dict[Any, float], name: str, **labels: str) -> float | None:
    return found.get((name, frozenset(labels.items())))


def scrape(port: int) -> dict[Any, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        return samples(reply.read().decode())


def test_a_worker_serves_its_metrics_and_its_queues(
    redis_url: str, queue_name: str, sync_queue: Queue
) -> None:
    sync_queue.enqueue_many([("chatty", i) for i in range(5)] + [("broken", 0)])
    port = free_port()
    proc = spawn_worker(
        "observe_app:tasks", redis_url, "--metrics-port", str(port), "--lease", "1.5",
        env={"TEST_QUEUE": queue_name},
    )  # fmt: skip
    q = queue_name
    try:

        def done() -> dict[Any, float] | None:
            try:
                found = scrape(port)
            except OSError:
                return None  # not listening yet
            totals = value(found, "conveyor_queue_outcomes_total", queue=q, outcome="completed")
            return found if totals == 5 else None

        found = wait_until(done, timeout=60, interval=0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=30)[0].decode()
    assert proc.returncode == 0, output

    jobs = "conveyor_worker_jobs_total"
    assert value(found, jobs, queue=q, task="chatty", outcome="completed") == 5
    assert value(found, jobs, queue=q, task="broken", outcome="failed") == 1
    assert value(found, "conveyor_job_run_seconds_count", queue=q, task="chatty") == 5
    assert value(found, "conveyor_job_run_seconds_count", queue=q, task="broken") == 1
    assert value(found, "conveyor_job_wait_seconds_count", queue=q, task="chatty") == 5
    assert value(found, "conveyor_job_run_seconds_bucket", queue=q, task="chatty", le="+Inf") == 5
    assert value(found, "conveyor_queue_jobs", queue=q, state="completed") == 5
    assert value(found, "conveyor_queue_jobs", queue=q, state="failed") == 1
    assert value(found, "conveyor_queue_jobs", queue=q, state="waiting") == 0
    assert value(found, "conveyor_queue_live_workers", queue=q) == 1
    assert value(found, "conveyor_queue_outcomes_total", queue=q, outcome="failed") == 1
    assert value(found, "conveyor_queue_outcomes_total", queue=q, outcome="stalled") == 0


def test_the_asgi_app_reads_the_queues_from_redis(
    redis_url: str, queue_name: str, sync_queue: Queue
) -> None:
    sync_queue.enqueue_many([("a", 1), ("b", 2)])
    sync_queue.enqueue("a", 3, delay=60)

    async def get(method: str = "GET") -> tuple[int, dict[bytes, bytes], bytes]:
        other = AsyncQueue("other-" + queue_name, url=redis_url)
        app = metrics_app([queue_name, other], url=redis_url)
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await app({"type": "http", "method": method, "path": "/metrics"}, receive, send)
        await app.close()
        await other.close()
        return sent[0]["status"], dict(sent[0]["headers"]), sent[1]["body"]

    status, headers, body = asyncio.run(get())
    assert status == 200 and headers[b"content-type"].startswith(b"text/plain")
    found = samples(body.decode())
    assert value(found, "conveyor_queue_jobs", queue=queue_name, state="waiting") == 2
    assert value(found, "conveyor_queue_jobs", queue=queue_name, state="delayed") == 1
    assert value(found, "conveyor_queue_jobs", queue="other-" + queue_name, state="waiting") == 0
    assert value(found, "conveyor_queue_live_workers", queue=queue_name) == 0
    assert value(found, "conveyor_queue_outcomes_total", queue=queue_name, outcome="completed") == 0
    assert asyncio.run(get("POST"))[0] == 405

    async def listed() -> bytes:  # queues listed by a callable at each scrape
        mine = AsyncQueue(queue_name, url=redis_url)

        async def queues() -> list[AsyncQueue]:
            return [mine]

        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await metrics_app(queues)({"type": "http", "method": "GET"}, None, send)
        await mine.close()
        return bytes(sent[1]["body"])

    found = samples(asyncio.run(listed()).decode())
    assert value(found, "conveyor_queue_jobs", queue=queue_name, state="waiting") == 2


@pytest.mark.parametrize("port", ["nope"])
def test_a_bad_metrics_port_is_a_usage_error(port: str, redis_url: str) -> None:
    from click.testing import CliRunner

    from conveyor.integrations.cli import main

    result = CliRunner().invoke(
        main, ["worker", "observe_app:tasks", "--url", redis_url, "--metrics-port", port]
    )
    assert result.exit_code == 2 and "--metrics-port" in result.output


def test_the_asgi_app_closes_its_queues_at_lifespan_shutdown(
    redis_url: str, queue_name: str
) -> None:
    async def serve() -> list[str]:
        app = metrics_app([queue_name], url=redis_url)
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        async def no_body() -> dict[str, Any]:
            return {"type": "http.request", "body": b""}

        await app({"type": "http", "method": "GET"}, no_body, send)  # opens the queue
        messages = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])

        async def lifespan() -> dict[str, Any]:
            return next(messages)

        await app({"type": "lifespan"}, lifespan, send)
        return [m["type"] for m in sent]

    # an unclosed connection would fail the test (warnings are errors)
    assert asyncio.run(serve()) == [
        "http.response.start", "http.response.body",
        "lifespan.startup.complete", "lifespan.shutdown.complete",
    ]  # fmt: skip

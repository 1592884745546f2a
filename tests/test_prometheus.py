"""Prometheus: scraped over HTTP from a real worker process, and the ASGI
/metrics app read in process."""

from __future__ import annotations

import asyncio
import signal
import socket
import time
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
            # the roll call's running figure follows within about a second (no write per job)
            idle = value(found, "conveyor_queue_busy_slots", queue=q) == 0
            return found if totals == 5 and idle else None

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
    # alertable from the start: counters at zero before anything happened
    assert value(found, jobs, queue=q, task="chatty_sync", outcome="retried") == 0
    assert value(found, "conveyor_worker_stalled_total", queue=q) == 0
    assert value(found, "conveyor_worker_lease_losses_total", queue=q) == 0
    # the process collector, and the queue's latency, paused and slot gauges
    assert (value(found, "process_resident_memory_bytes") or 0) > 1_000_000
    assert value(found, "process_cpu_seconds_total") is not None
    assert value(found, "conveyor_queue_oldest_waiting_seconds", queue=q) == 0
    assert value(found, "conveyor_queue_paused", queue=q) == 0
    assert (value(found, "conveyor_queue_slots", queue=q) or 0) >= 1
    assert value(found, "conveyor_queue_busy_slots", queue=q) == 0
    assert value(found, "conveyor_queue_completed_per_minute", queue=q) is not None


def test_the_asgi_app_reads_the_queues_from_redis(
    redis_url: str, queue_name: str, sync_queue: Queue
) -> None:
    keys = sync_queue.core.keys
    sync_queue.client.zadd(keys.workers, {"w1": 2**50})  # a worker running a suspect (§8.1)
    sync_queue.client.set(keys.worker("w1"), '{"pid": 1, "suspects": ["s"]}')
    sync_queue.enqueue_many([("a", 1), ("b", 2)])
    sync_queue.enqueue("a", 3, delay=60)
    sync_queue.pause()
    time.sleep(0.2)

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
    assert value(found, "conveyor_queue_live_workers", queue=queue_name) == 1
    assert value(found, "conveyor_queue_suspects_running", queue=queue_name) == 1
    assert value(found, "conveyor_queue_suspects_running", queue="other-" + queue_name) == 0
    assert value(found, "conveyor_queue_outcomes_total", queue=queue_name, outcome="completed") == 0
    assert (value(found, "conveyor_queue_oldest_waiting_seconds", queue=queue_name) or 0) >= 0.2
    assert value(found, "conveyor_queue_paused", queue=queue_name) == 1
    assert value(found, "conveyor_queue_paused", queue="other-" + queue_name) == 0
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

    async def lane() -> bytes:  # a failure lane is labelled <queue>:failures
        mine = AsyncQueue(queue_name, url=redis_url, failures=True)
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await metrics_app([mine])({"type": "http", "method": "GET"}, None, send)
        await mine.close()
        return bytes(sent[1]["body"])

    sync_queue.failure_lane().enqueue("t", None)
    found = samples(asyncio.run(lane()).decode())
    lane_name = f"{queue_name}:failures"
    assert value(found, "conveyor_queue_jobs", queue=lane_name, state="waiting") == 1


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


def test_a_worker_exports_its_current_concurrency_limit(redis_url: str, queue_name: str) -> None:
    """Under --concurrency auto the limit moves: the gauge reads it at each scrape."""
    port = free_port()
    proc = spawn_worker(
        "observe_app:tasks", redis_url, "--metrics-port", str(port),
        "-c", "auto", "--min", "3", "--max", "5", env={"TEST_QUEUE": queue_name},
    )  # fmt: skip
    try:

        def limit() -> float | None:
            try:
                return value(scrape(port), "conveyor_worker_concurrency")
            except OSError:
                return None  # not listening yet

        found = wait_until(limit, timeout=60, interval=0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=30)[0].decode()
    assert proc.returncode == 0, output
    assert 3 <= found <= 5  # idle: the controller holds at its minimum, 3


def test_a_sigterm_once_the_metrics_port_is_up_stops_the_worker_cleanly(
    redis_url: str, queue_name: str
) -> None:
    """A deploy may stop a worker as soon as it answers scrapes: that SIGTERM is a
    graceful stop (exit 0 and the summary line), not death by the signal."""
    proc = spawn_worker(
        "observe_app:tasks", redis_url, "--metrics-port", str(free_port()),
        env={"TEST_QUEUE": queue_name},
    )  # fmt: skip
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line.decode())
        if "Prometheus metrics on" in seen[-1]:
            proc.send_signal(signal.SIGTERM)
            break
    output = "".join(seen) + proc.communicate(timeout=30)[0].decode()
    assert proc.returncode == 0, output
    assert "0 completed, 0 failed" in output


def head(host: str, port: int) -> tuple[int, str, bytes]:
    request = urllib.request.Request(f"http://{host}:{port}/metrics", method="HEAD")
    with urllib.request.urlopen(request, timeout=5) as reply:
        return reply.status, reply.headers["Content-Type"], reply.read()


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=5):
            return True
    except OSError:
        return False


def test_a_worker_listens_on_loopback_by_default_and_answers_head(
    redis_url: str, queue_name: str
) -> None:
    """127.0.0.2 is loopback too, but a socket bound to 127.0.0.1 refuses it:
    the worker is not listening on every address."""
    port = free_port()
    proc = spawn_worker(
        "observe_app:tasks", redis_url, "--metrics-port", str(port),
        env={"TEST_QUEUE": queue_name},
    )  # fmt: skip
    try:
        wait_until(lambda: reachable("127.0.0.1", port), timeout=60, interval=0.2)
        status, kind, body = head("127.0.0.1", port)
        assert not reachable("127.0.0.2", port)
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=30)[0].decode()
    assert proc.returncode == 0, output
    assert (status, body) == (200, b"")
    assert kind.startswith("text/plain")
    assert f"http://127.0.0.1:{port}/metrics" in output


def test_metrics_host_chooses_the_address() -> None:
    from prometheus_client import CollectorRegistry, Counter

    from conveyor.integrations.prometheus import serve

    registry = CollectorRegistry()
    Counter("probe", "a probe", registry=registry).inc()
    port = free_port()
    server = serve(registry, port, "0.0.0.0")
    try:
        assert head("127.0.0.2", port)[0] == 200
        assert value(scrape(port), "probe_total") == 1
    finally:
        server.shutdown()
        server.server_close()


def test_a_bad_metrics_host_is_a_usage_error(redis_url: str, queue_name: str) -> None:
    proc = spawn_worker(
        "observe_app:tasks", redis_url, "--metrics-port", str(free_port()),
        "--metrics-host", "no-such-host.invalid", env={"TEST_QUEUE": queue_name},
    )  # fmt: skip
    output = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 2 and "--metrics-host" in output, output

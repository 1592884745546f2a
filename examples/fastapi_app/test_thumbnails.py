"""The example app's tests: FastAPI's TestClient, a private Redis and Conveyor's workers
(the pytest plugin's in-process burst worker, and a real `conveyor worker` process)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio.to_thread
import httpx
import pytest
from asgi_lifespan import LifespanManager
from fastapi.testclient import TestClient
from thumbnails import app, tasks

from conveyor import Queue
from conveyor.errors import ConfigurationError, ConnectionLostError

HERE = Path(__file__).resolve().parent


@pytest.fixture
def client(conveyor_url: str) -> Iterator[TestClient]:
    with TestClient(app) as client:  # runs the lifespan: queues open, server checked
        yield client


def test_a_thumbnail_from_request_to_result(client: TestClient, conveyor_worker) -> None:
    created = client.post("/thumbnails", json={"path": "cat.jpg", "size": 64})
    assert created.status_code == 202
    url = f"/thumbnails/{created.json()['id']}"
    assert client.get(url).json()["state"] == "waiting"
    assert client.get("/queue").json()["waiting"] == 1

    assert conveyor_worker.drain(tasks).completed == 1

    assert client.get(url).json() == {
        "state": "completed",
        "progress": 1.0,
        "result": {"thumbnail": "thumbs/64/cat.jpg"},
    }


def test_each_test_client_gets_its_own_queues(client: TestClient) -> None:
    """A second TestClient (a second event loop) works: the queues are the lifespan's."""
    assert client.post("/thumbnails", json={"path": "a.jpg"}).status_code == 202
    with TestClient(app) as second:
        assert second.post("/thumbnails", json={"path": "b.jpg"}).status_code == 202
        assert second.get("/queue").json()["waiting"] == 2


def test_unknown_and_invalid_ids_are_404(client: TestClient) -> None:
    assert client.get("/thumbnails/nope").status_code == 404
    assert client.get("/thumbnails/" + "x" * 300).status_code == 404  # get() gives None
    assert client.get("/thumbnails/a b").status_code == 404


async def test_async_tests_with_httpx_and_the_lifespan(conveyor_url: str, conveyor_worker) -> None:
    """httpx's ASGITransport runs no lifespan: LifespanManager runs it (and hands its state
    to every request)."""
    async with (
        LifespanManager(app) as manager,
        httpx.AsyncClient(transport=httpx.ASGITransport(manager.app), base_url="http://t") as c,
    ):
        created = await c.post("/thumbnails", json={"path": "cat.jpg", "size": 32})
        assert created.status_code == 202
        assert (await conveyor_worker.adrain(tasks)).completed == 1
        status = await c.get(f"/thumbnails/{created.json()['id']}")
        assert status.json()["result"] == {"thumbnail": "thumbs/32/cat.jpg"}


def test_the_queue_dependencies_take_no_thread(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An async endpoint with the AsyncQueue dependency runs on the event loop alone; a
    `def` endpoint takes the thread pool for itself only, not for its Queue dependency."""
    hops: list[object] = []
    run_sync = anyio.to_thread.run_sync

    async def counted(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        hops.append(fn)
        return await run_sync(fn, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counted)
    job_id = client.post("/thumbnails", json={"path": "a.jpg"}).json()["id"]
    assert client.get(f"/thumbnails/{job_id}").status_code == 200
    assert hops == []
    assert client.get("/queue").json()["waiting"] == 1
    assert hops and not any("dependency" in repr(hop) for hop in hops)  # the endpoint's own


def test_without_the_lifespan_the_error_says_what_to_do(conveyor_url: str) -> None:
    client = TestClient(app)  # not entered: the lifespan never runs
    with pytest.raises(ConfigurationError, match="lifespan has not run"):
        client.get("/queue")


def test_a_wrong_url_fails_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVEYOR_REDIS_URL", "redis://127.0.0.1:1/0")  # nothing listens there
    with pytest.raises(ConnectionLostError), TestClient(app):
        pass


def test_with_a_real_worker_process(
    client: TestClient, conveyor_url: str, conveyor_queue: Queue
) -> None:
    worker = subprocess.Popen(
        [sys.executable, "-m", "conveyor", "worker", "thumbnails:tasks", "--url", conveyor_url],
        cwd=HERE,
        env={**os.environ, "PYTHONPATH": str(HERE)},
    )
    try:
        job_id = client.post("/thumbnails", json={"path": "dog.png"}).json()["id"]
        result = conveyor_queue.wait_result(job_id, timeout=60)
        assert result == {"thumbnail": "thumbs/128/dog.png"}
        assert client.get(f"/thumbnails/{job_id}").json()["state"] == "completed"
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0

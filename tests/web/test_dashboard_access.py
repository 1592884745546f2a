"""Access to the dashboard over HTTP (no browser): token, basic auth, the auth
hook, CSRF, read-only, no Redis password in any page, mounting in FastAPI."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis
from starlette.requests import Request
from starlette.responses import PlainTextResponse

from conveyor import JobState, Queue
from conveyor.integrations.web import DashboardSettings, dashboard_app, with_dashboard


@pytest.fixture
async def make() -> AsyncIterator[Any]:
    """dashboard_app, with each app's connections closed after the test (on its loop)."""
    made: list[Any] = []

    def build(settings: DashboardSettings) -> Any:
        made.append(dashboard_app(settings))
        return made[-1]

    yield build
    for app in made:
        await app.state.queues.close()


def _client(app: Any, **options: Any) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://dash.test", **options)


async def test_a_token_is_asked_for_then_kept_in_a_cookie(
    make: Any, redis_url: str, queue_name: str
) -> None:
    app = make(DashboardSettings(url=redis_url, queues=(queue_name,), token="s3cret"))
    async with _client(app) as client:
        assert (await client.get("/")).status_code == 401
        assert (await client.get("/?token=wrong")).status_code == 401
        first = await client.get("/?token=s3cret")
        assert first.status_code == 200 and client.cookies.get("conveyor_token") == "s3cret"
        assert (await client.get("/")).status_code == 200  # the cookie
    async with _client(app, headers={"Authorization": "Bearer s3cret"}) as client:
        assert (await client.get("/")).status_code == 200


async def test_basic_auth(make: Any, redis_url: str, queue_name: str) -> None:
    app = make(DashboardSettings(url=redis_url, queues=(queue_name,), basic="ops:pw"))
    async with _client(app) as client:
        refused = await client.get("/")
        assert refused.status_code == 401 and "Basic" in refused.headers["www-authenticate"]
        assert (await client.get("/", auth=("ops", "nope"))).status_code == 401
        assert (await client.get("/", auth=("ops", "pw"))).status_code == 200


async def test_the_auth_hook_decides(make: Any, redis_url: str, queue_name: str) -> None:
    async def only_ops(request: Request) -> bool:
        return request.headers.get("x-user") == "ops"

    app = make(DashboardSettings(url=redis_url, queues=(queue_name,), auth=only_ops))
    async with _client(app) as client:
        assert (await client.get("/")).status_code == 403
        assert (await client.get("/", headers={"x-user": "ops"})).status_code == 200


async def test_actions_need_the_csrf_token_from_the_same_site(
    make: Any, redis_url: str, queue_name: str, sync_queue: Queue
) -> None:
    sync_queue.enqueue("t", None, id="later", delay=3600)
    app = make(DashboardSettings(url=redis_url, queues=(queue_name,)))
    action = f"/queues/{queue_name}/do/promote"
    async with _client(app) as client:
        assert (await client.post(action, data={"id": "later"})).status_code == 403
        first = await client.get(f"/queues/{queue_name}")  # sets the token's cookie
        token = client.cookies["conveyor_csrf"]
        assert f'name="csrf" value="{token}"' in first.text  # the first page's forms agree
        forged = await client.post(action, data={"id": "later", "csrf": "guess"})
        assert forged.status_code == 403
        foreign = await client.post(
            action, data={"id": "later", "csrf": token}, headers={"origin": "http://evil.test"}
        )
        assert foreign.status_code == 403
        assert sync_queue.get("later").state is JobState.DELAYED
        done = await client.post(action, data={"id": "later", "csrf": token, "back": "//evil"})
        assert done.status_code == 303
        assert done.headers["location"] == f"/queues/{queue_name}"  # not //evil
        assert "promoted later" in done.headers["set-cookie"]  # the flash, not in the address
    assert sync_queue.get("later").state is JobState.WAITING


async def test_no_page_shows_the_redis_password(
    make: Any, redis_url: str, queue_name: str, redis_client: redis.Redis
) -> None:
    user, password = f"dash-{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}"
    redis_client.execute_command("ACL", "SETUSER", user, "on", f">{password}", "~*", "&*", "+@all")
    try:
        url = redis_url.replace("redis://", f"redis://{user}:{password}@")
        with Queue(queue_name, url=url) as queue:
            queue.enqueue("t", {"n": 1}, id="j1", index={"customer": "acme"})
            queue.schedule("s1", "t", None, every=60)
        dead = "redis://user:" + password + "@127.0.0.1:1/0"  # a server that is not there
        for target in (url, dead):
            app = make(DashboardSettings(url=target))
            async with _client(app) as client:
                for path in ("/", f"/queues/{queue_name}", f"/queues/{queue_name}/jobs/waiting",
                             f"/queues/{queue_name}/job?id=j1", f"/queues/{queue_name}/workers",
                             f"/queues/{queue_name}/schedules", "/queues/nope",
                             f"/queues/{queue_name}/search?field=customer&value=acme"):  # fmt: skip
                    answer = await client.get(path)
                    assert password not in answer.text, path
                    assert answer.status_code < 500 or target == dead, (path, answer.text)
    finally:
        redis_client.execute_command("ACL", "DELUSER", user)


async def test_mounted_in_fastapi_under_a_prefix(
    make: Any, redis_url: str, queue_name: str, sync_queue: Queue
) -> None:
    fastapi = pytest.importorskip("fastapi")
    sync_queue.enqueue("t", None, id="j1")
    host = fastapi.FastAPI()
    host.mount("/admin/jobs", make(DashboardSettings(url=redis_url)))
    async with _client(host) as client:
        page = await client.get("/admin/jobs/")
        assert page.status_code == 200
        assert f'href="/admin/jobs/queues/{queue_name}"' in page.text  # a path: no Host in links
        assert "/admin/jobs/static/htmx.min.js" in page.text
        assert (await client.get("/admin/jobs/static/htmx.min.js")).status_code == 200
        job = await client.get(f"/admin/jobs/queues/{queue_name}/job?id=j1")
        assert job.status_code == 200 and "j1" in job.text


async def test_beside_an_app_that_cannot_mount(
    make: Any, redis_url: str, queue_name: str, sync_queue: Queue
) -> None:
    """with_dashboard: how a Django ASGI application serves the dashboard."""
    sync_queue.enqueue("t", None, id="j1")

    async def other(scope: Any, receive: Any, send: Any) -> None:
        await PlainTextResponse("the other app")(scope, receive, send)

    combined = with_dashboard(other, "/conveyor/", make(DashboardSettings(url=redis_url)))
    async with _client(combined) as client:
        assert (await client.get("/admin/")).text == "the other app"
        assert (await client.get("/conveyorx")).text == "the other app"
        page = await client.get(f"/conveyor/queues/{queue_name}/job?id=j1")
        assert page.status_code == 200 and "j1" in page.text
        assert "/conveyor/static/style.css" in page.text


async def test_an_unknown_queue_or_state_is_a_404(
    make: Any, redis_url: str, queue_name: str
) -> None:
    app = make(DashboardSettings(url=redis_url))
    async with _client(app) as client:
        assert (await client.get("/queues/no-such-queue")).status_code == 404
        assert (await client.get("/queues/bad name!")).status_code == 404
        assert (await client.get(f"/queues/{queue_name}/jobs/nonsense")).status_code == 404


def test_conveyor_dashboard_serves_on_loopback(redis_url: str, sync_queue: Queue) -> None:
    sync_queue.enqueue("t", None, id="j1")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "conveyor.integrations.cli", "dashboard", "--url", redis_url,
               "--port", str(port), "--read-only"]  # fmt: skip
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stderr is not None
        assert f"dashboard on http://127.0.0.1:{port}/" in server.stderr.readline()
        page = None
        for _ in range(200):
            try:
                page = httpx.get(f"http://127.0.0.1:{port}/queues/{sync_queue.name}/job?id=j1")
                break
            except httpx.ConnectError:
                time.sleep(0.05)
        assert page is not None and page.status_code == 200 and "read-only" in page.text
    finally:
        server.terminate()
        server.communicate(timeout=15)


async def test_metrics_for_prometheus_behind_the_same_access(
    make: Any, redis_url: str, queue_name: str, sync_queue: Queue
) -> None:
    sync_queue.enqueue("t", None)
    sync_queue.enqueue("t", None, delay=60)
    app = make(DashboardSettings(url=redis_url, queues=(queue_name,), token="s3cret"))
    async with _client(app) as client:
        assert (await client.get("/metrics")).status_code == 401
        scraped = await client.get("/metrics", headers={"Authorization": "Bearer s3cret"})
    assert scraped.status_code == 200 and scraped.headers["content-type"].startswith("text/plain")
    lines = scraped.text.splitlines()
    assert f'conveyor_queue_jobs{{queue="{queue_name}",state="waiting"}} 1.0' in lines
    assert f'conveyor_queue_jobs{{queue="{queue_name}",state="delayed"}} 1.0' in lines
    assert f'conveyor_queue_live_workers{{queue="{queue_name}"}} 0.0' in lines


async def test_a_flow_nodes_page_shows_its_parent_and_a_page_of_children(
    make: Any, redis_url: str, queue_name: str
) -> None:
    from conveyor.client.flows import FlowJob

    other = f"{queue_name}-b"
    children = [FlowJob(task="part", data=n, options={"id": f"c{n}"}) for n in range(3)]
    children.append(FlowJob(task="far", queue=other, on_fail="ignore", options={"id": "x"}))
    with Queue(queue_name, url=redis_url) as q:
        q.enqueue_flow(FlowJob(task="sum", options={"id": "root"}, children=children))
    app = make(DashboardSettings(url=redis_url, queues=(queue_name, other), page_size=2))
    async with _client(app) as client:
        page = (await client.get(f"/queues/{queue_name}/job?id=root")).text
        assert "4 children: 4 pending, 0 done, 0 failed, 0 ignored" in page
        assert f"{queue_name}/c0" in page and f"{queue_name}/c1" in page
        assert f"{queue_name}/c2" not in page and "next 2 children" in page
        second = (await client.get(f"/queues/{queue_name}/job?id=root&children=2")).text
        assert f"{queue_name}/c2" in second and f"{other}/x" in second
        listed = (await client.get(f"/queues/{queue_name}/jobs/waiting_children")).text
        assert "root" in listed
        child = (await client.get(f"/queues/{other}/job?id=x")).text
        assert f"{queue_name}/root" in child and "if this job fails: <b>ignore</b>" in child


async def test_suspects_are_shown_and_can_be_released_or_failed(
    make: Any, redis_url: str, queue_name: str, sync_queue: Queue
) -> None:
    keys = sync_queue.core.keys
    for job_id in ("s1", "s2"):
        sync_queue.enqueue("t", None, id=job_id)
        sync_queue.client.hset(keys.job(job_id), "stalls", 1)
    sync_queue.client.zadd(keys.workers, {"w1": 2**50})  # a worker running a suspect (§8.1)
    sync_queue.client.set(keys.worker("w1"), '{"pid": 1, "suspects": ["s9"]}')
    app = make(DashboardSettings(url=redis_url, queues=(queue_name,)))
    async with _client(app) as client:
        queue_page = await client.get(f"/queues/{queue_name}")
        assert "Suspects running" in queue_page.text and "s9" in queue_page.text
        workers_page = (await client.get(f"/queues/{queue_name}/workers")).text
        assert 'class="badge suspect"' in workers_page and "s9" in workers_page
        job_page = (await client.get(f"/queues/{queue_name}/job", params={"id": "s1"})).text
        assert 'class="badge suspect"' in job_page and "Release suspect" in job_page
        token = client.cookies["conveyor_csrf"]
        for act, job_id in (("release_suspect", "s1"), ("fail_suspect", "s2")):
            done = await client.post(
                f"/queues/{queue_name}/do/{act}", data={"id": job_id, "csrf": token}
            )
            assert done.status_code == 303, done.text
        refused = await client.post(
            f"/queues/{queue_name}/do/release_suspect", data={"id": "s1", "csrf": token}
        )
        shown = (await client.get(refused.headers["location"])).text  # the refusal, on the page
        assert 'class="flash flash-refused"' in shown and "not a suspect" in shown
    assert not sync_queue.get("s1").suspect
    assert sync_queue.get("s2").state is JobState.FAILED

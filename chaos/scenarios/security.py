"""Scenario 17: TLS with a test CA and a least-privilege ACL user."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import redis

from chaos import ledger
from chaos.checker import Result, tally
from chaos.harness import Enqueue, Scene, drained, wait_until
from chaos.scenarios import scenario

APP_PASSWORD = "S3cret-chaos-app-pw-4711"
ADMIN_PASSWORD = "S3cret-chaos-admin-pw-0815"
# What a queue needs and no more: its own keys, the commands its scripts and clients run.
APP_RULES = [
    "on", f">{APP_PASSWORD}", "resetkeys", "~conveyor:{chaos}:*", "resetchannels",
    "-@all", "+@read", "+@write", "+@scripting", "+@blocking", "+@connection", "+time",
    "-@dangerous", "+info",
]  # fmt: skip


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(directory: Path, name: str) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 / localhost it signed."""
    directory.mkdir(parents=True, exist_ok=True)
    d = directory
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
             f"/CN={name} test CA", "-keyout", "ca.key", "-out", "ca.crt", cwd=d)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
             "-keyout", "server.key", "-out", "server.csr", cwd=d)  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.crt",
             cwd=d)  # fmt: skip
    return d / "ca.crt", d / "server.crt", d / "server.key"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def tls_url(port: int, ca: Path, *, user: str = "app", password: str = APP_PASSWORD) -> str:
    return (
        f"rediss://{quote(user)}:{quote(password)}@127.0.0.1:{port}/0"
        f"?ssl_ca_certs={quote(str(ca))}&ssl_cert_reqs=required"
    )


def _attempt(fn: Any) -> tuple[str, float, str]:
    t0 = time.monotonic()
    try:
        fn()
        return "ok", time.monotonic() - t0, ""
    except Exception as exc:
        return type(exc).__name__, time.monotonic() - t0, str(exc)


@scenario(
    17,
    "tls-acl",
    "TLS with a test CA and a least-privilege ACL user: core cases pass; wrong credentials "
    "fail fast and clearly; no password in logs or reprs",
    full=dict(jobs=2_000, kills=4, lease=2.0),
    bounded=dict(jobs=400, kills=1, lease=2.0),
)
def tls_acl(scene: Scene, *, jobs: int, kills: int, lease: float) -> Result:
    from conveyor import Queue
    from conveyor.client.tasks import Tasks
    from conveyor.errors import ConfigurationError

    r = Result("tls-acl")
    ca, cert, key = make_ca(scene.dir / "pki", "conveyor")
    rogue_ca, _, _ = make_ca(scene.dir / "rogue", "rogue")
    port = _free_port()
    sock = scene.socket_path("tls.sock")
    server = scene.server(
        port=0,
        unixsocket=sock,
        extra_args=[
            "--tls-port", str(port), "--tls-cert-file", str(cert), "--tls-key-file", str(key),
            "--tls-ca-cert-file", str(ca), "--tls-auth-clients", "no",
            "--user", "default", "off",
            "--user", "admin", "on", f">{ADMIN_PASSWORD}", "~*", "&*", "+@all",
            "--user", "app", *APP_RULES,
        ],
    )  # fmt: skip
    admin_client = redis.Redis(
        unix_socket_path=str(sock), username="admin", password=ADMIN_PASSWORD
    )
    url = tls_url(port, ca)

    # 1. the core cases, over TLS, as the least-privilege user
    q = Queue("chaos", url=url)
    status, took, text = _attempt(q.check)
    r.check(
        "TLS + ACL user: the server check passes (CONFIG GET is denied and tolerated)",
        status == "ok",
        f"{status} {text[:120]}",
    )
    pool = scene.workers(url, 2, concurrency=8, lease=lease)
    pool.start()
    r.check("workers connect over TLS as the ACL user", pool.wait_ready(20))
    producer = scene.producer(url)
    rng = scene.rng
    specs = [
        Enqueue(f"j{n:05d}", "work", {"s": round(rng.uniform(0.01, 0.04), 3)}) for n in range(jobs)
    ]
    window = max(3.0, kills * 1.5)
    feeder = threading.Thread(
        target=producer.stream, args=(specs,), kwargs={"seconds": window, "batch": 10}
    )
    feeder.start()
    for _ in range(kills):
        time.sleep(rng.uniform(0.5, 1.5))
        victim = rng.randrange(2)
        pool.kill(victim)
        pool.start(victim)
    feeder.join(timeout=window + 60)
    done = wait_until(drained(admin_client, "chaos", jobs), 30, 0.1)
    r.check("all jobs finished over TLS, with workers SIGKILLed", done)
    t = tally(list(ledger.read(scene.ledger_path)), admin_client, "chaos")
    r.absorb(t)
    r.kills = kills
    r.check("0 lost", not t.lost, t.lost[:10])
    r.check("0 completions accepted twice", not t.double_acks)
    bound = kills * 8
    r.check(
        f"duplicates <= kills x concurrency = {bound}",
        len(t.duplicates) <= bound,
        len(t.duplicates),
    )
    probes = {
        "get": lambda: q.get("j00000"),
        "counts": q.counts,
        "workers": q.workers,
        "events": lambda: q.events(after="0-0", count=10),
        "wait_result": lambda: q.wait_result("j00000", timeout=2),
        "pause/resume": lambda: (q.pause(), q.resume()),
        "cancel": lambda: q.cancel("nope"),
    }
    for name, fn in probes.items():
        status, _, text = _attempt(fn)
        r.check(
            f"client call {name} works as the ACL user over TLS",
            status == "ok",
            f"{status} {text[:100]}",
        )

    # 2. the ACL really is least privilege
    raw = redis.Redis.from_url(url)
    for what, fn in {
        "SET outside the queue's keys": lambda: raw.set("other", 1),
        "FLUSHALL": raw.flushall,
        "KEYS": lambda: raw.keys("*"),
        "CONFIG GET": lambda: raw.config_get("maxmemory"),
        "another queue's keys": lambda: raw.hset("conveyor:{other}:meta", "x", 1),
    }.items():
        status, _, text = _attempt(fn)
        r.check(
            f"the app user cannot run {what}",
            "NOPERM" in text or "NoPermission" in status,
            f"{status}: {text[:80]}",
        )
    raw.close()
    status, took, text = _attempt(lambda: Queue("other", url=url).enqueue("work", 1))
    r.check(
        "a queue outside the ACL's key pattern: ConfigurationError naming the permission",
        status == "ConfigurationError" and "permission" in text,
        f"{status}: {text[:120]}",
    )

    # 3. wrong credentials and broken TLS fail fast, typed, and clearly
    before = int(admin_client.info("stats")["total_connections_received"])
    bad_url = tls_url(port, ca, password="wrong-" + APP_PASSWORD[:4])
    status, took, text = _attempt(lambda: Queue("chaos", url=bad_url).enqueue("work", 1))
    after = int(admin_client.info("stats")["total_connections_received"])
    r.check(
        "wrong password: ConfigurationError in under 1 s",
        status == ConfigurationError.__name__ and took < 1.0,
        f"{status} in {took:.2f} s: {text[:100]}",
    )
    r.check(
        "wrong password: not retried (at most 2 connections)", after - before <= 2, after - before
    )
    status, took, text = _attempt(
        lambda: Queue("chaos", url=tls_url(port, ca, user="nobody")).enqueue("work", 1)
    )
    r.check(
        "unknown user: ConfigurationError in under 1 s",
        status == ConfigurationError.__name__ and took < 1.0,
        f"{status} in {took:.2f} s",
    )
    status, took, text = _attempt(
        lambda: Queue("chaos", url=tls_url(port, rogue_ca)).enqueue("work", 1)
    )
    r.check(
        "server certificate not from the trusted CA: a ConveyorError within 2 s that says so",
        status in ("ConnectionLostError", "ConfigurationError")
        and took < 2.0
        and "certificate" in text.lower(),
        f"{status} in {took:.2f} s: {text[:140]}",
    )
    plain = f"redis://app:{APP_PASSWORD}@127.0.0.1:{port}/0"
    status, took, text = _attempt(lambda: Queue("chaos", url=plain).enqueue("work", 1))
    r.check(
        "plaintext to the TLS port: a ConnectionLostError within 2 s, not an UncertainWriteError",
        status == "ConnectionLostError" and took < 2.0,
        f"{status} in {took:.2f} s: {text[:120]}",
    )
    bad_worker = scene.workers(bad_url, 1)
    bad_worker.start()
    proc = bad_worker.procs[0]
    assert proc is not None
    exited = wait_until(lambda: not proc.alive, 10)
    out = proc.log_path.read_text(errors="replace")
    r.check(
        "a worker with a wrong password exits at once with a clear error",
        exited and proc.popen.returncode != 0 and "credentials" in out,
        f"exit {proc.popen.returncode}: {(out.strip().splitlines() or [''])[-1][:120]}",
    )

    # 4. no secret anywhere we print
    texts = {
        "worker logs": scene.logs(),
        "repr(Queue)": repr(q),
        "repr(Queue.client)": repr(q.client),
        "repr(Tasks)": repr(Tasks("chaos", url=url)),
        "errors": text,
    }
    for name, fn in {
        "wrong password": lambda: Queue("chaos", url=bad_url).enqueue("work", 1)
    }.items():
        texts[f"error: {name}"] = _attempt(fn)[2]
    leaks = [
        name for name, value in texts.items() if APP_PASSWORD in value or APP_PASSWORD[:10] in value
    ]
    r.check("no password in worker logs, reprs or error messages", not leaks, leaks)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, timeout=10).stdout
    r.check("no password on any worker's command line", APP_PASSWORD not in ps)
    r.metrics.update(tls_port=port, acl_rules=" ".join(APP_RULES).replace(APP_PASSWORD, "***"))
    q.close()
    pool.stop()
    admin_client.close()
    del server
    return r

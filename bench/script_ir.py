"""Redis instructions (callgrind Ir) per claimed job: claim's full and compact replies.

    .venv/bin/python -m bench.script_ir [--ref main] [--jobs 2000] [--batch 100,10] [--options]

A private `redis-server` runs under `valgrind --tool=callgrind --instr-atstart=no`;
for each batch size and variant a fresh queue gets `jobs + batch` jobs (`enqueue_new`,
no options; `--options` then sets 11 of the 12 optional fields on every record), one
claim warms up, and instrumentation is switched on (`callgrind_control -i on`) around
`jobs / batch` claims only. The figure is the whole server's Ir divided by the jobs
claimed. Variants: `ref` (the claim.lua of `--ref`, the full reply), `full` (this
tree's, without ARGV[8]) and `compact` (this tree's, ARGV[8] = 1). Instructions, not
time: no load on the machine moves them (they differ by under 1% between runs).
"""

from __future__ import annotations

import argparse
import re
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import redis

from bench.script_time import sources_at, this_tree
from conveyor.protocol import ops
from conveyor.protocol.keys import QueueKeys

VARIANTS = ("ref", "full", "compact")
# --options: 11 of the 12 optional fields (not stalls: a job that stalled is claimed alone)
OPTIONS = {
    "failures": 1, "max_failures": 5, "max_stalls": 4, "min_backoff": 2000, "max_backoff": 9000,
    "timeout": 1000, "priority": 7, "schedule": "s", "headers": '{"a":1}',
    "checkpoint": '{"c":1}', "expires_at": 99_999_999_999_999,
}  # fmt: skip


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Server:
    """redis-server under callgrind, instrumentation off until asked."""

    def __init__(self, out: Path) -> None:
        self.out = out
        port = free_port()
        self.proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no",
             f"--callgrind-out-file={out}/cg.out", "redis-server", "--port", str(port),
             "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.client = redis.Redis(port=port)
        for _ in range(600):
            try:
                self.client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.1)
        raise RuntimeError("redis-server under valgrind did not start")

    def ctl(self, *args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(self.proc.pid)], check=True,
                       capture_output=True)  # fmt: skip

    def measured(self, work: Callable[[], object]) -> int:
        """Ir of the server while `work()` runs."""
        self.ctl("-z")
        self.ctl("-i", "on")
        work()
        self.ctl("-i", "off")
        return self.dumped()

    def dumped(self) -> int:
        """Ir counted since the last zeroing (or the start), dumped now."""
        before = set(self.out.glob("cg.out.*"))
        self.ctl("-d")
        (dump,) = set(self.out.glob("cg.out.*")) - before
        found = re.search(r"^totals: (\d+)", dump.read_text(), re.M)
        assert found, dump
        return int(found.group(1))

    def close(self) -> None:
        self.client.close()
        self.proc.terminate()
        self.proc.wait()


def ir_per_job(server: Server, sha: str, variant: str, jobs: int, batch: int,
               options: bool) -> float:  # fmt: skip
    client = server.client
    keys = QueueKeys("bench", "ir-" + uuid.uuid4().hex[:8])
    enqueue = this_tree()["enqueue_new"]
    for _ in range(0, jobs + batch, 200):
        new = [(uuid.uuid4().hex[:16], "t", '{"n":1}') for _ in range(200)]
        call = ops.enqueue_new(keys, new, events_maxlen=10_000)
        client.eval(enqueue, len(call.keys), *call.keys, *call.args)
    if options:
        pipe = client.pipeline(transaction=False)
        for key in client.scan_iter(f"{keys.base}job:*", count=1000):
            pipe.hset(key, mapping=OPTIONS)  # type: ignore[arg-type]
        pipe.execute()

    def claim(i: int) -> object:
        compact = variant == "compact"
        call = ops.claim(keys, worker_id="w", count=batch, lease_ms=60_000, token=f"k{i}",
                         promote=100, events_maxlen=10_000, compact=compact)  # fmt: skip
        return client.evalsha(sha, len(call.keys), *call.keys, *call.args)

    claim(-1)  # warm-up
    ir = server.measured(lambda: [claim(i) for i in range(jobs // batch)])
    client.flushall()
    return ir / (jobs // batch * batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default="main", help="git ref whose claim.lua is `ref`")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--batch", default="100,10", help="jobs per claim call, comma-separated")
    parser.add_argument("--options", action="store_true", help="every record with its options set")
    args = parser.parse_args()
    batches = [int(b) for b in args.batch.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(Path(tmp))
        try:
            client = server.client
            shas = {"ref": client.script_load(sources_at(args.ref)["claim"])}
            shas["full"] = shas["compact"] = client.script_load(this_tree()["claim"])
            print(f"claim, Ir of redis-server per job ({args.jobs} jobs"
                  f"{', options set' if args.options else ''}; ref = {args.ref})")  # fmt: skip
            print(f"  {'batch':>6s}" + "".join(f"{v:>10s}" for v in VARIANTS))
            for batch in batches:
                row = [ir_per_job(server, shas[v], v, args.jobs, batch, args.options)
                       for v in VARIANTS]  # fmt: skip
                print(f"  {batch:6d}" + "".join(f"{x:10.0f}" for x in row), flush=True)
        finally:
            server.close()


if __name__ == "__main__":
    main()

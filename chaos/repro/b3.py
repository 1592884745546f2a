"""B3: a record with a non-numeric max_failures, whose handler fails.

Before the fix: fail.lua raised after writing, the job was left `active` in no index, the
worker's ack writer died silently and nothing it ran was ever acknowledged again.
Run from the repo root: .venv/bin/python chaos/repro/b3.py
"""

from __future__ import annotations

import signal
import time

import redis
from common import server, worker

from conveyor import Queue

srv = server()
r = redis.Redis.from_url(srv.url)
q = Queue("r", url=srv.url)
q.enqueue("work", {"fail": 99}, id="bad")
r.hset("conveyor:{r}:job:bad", "max_failures", "lots")
w = worker(srv.url)
time.sleep(3)
for i in range(3):
    q.enqueue("work", {"s": 0}, id=f"ok{i}")
time.sleep(8)
print("worker alive:", w.poll() is None)
for k in ["bad", "ok0", "ok1", "ok2"]:
    indexed = r.zscore("conveyor:{r}:active", k) is not None
    print(k, r.hget(f"conveyor:{{r}}:job:{k}", "state"), "in active" if indexed else "in no index")
w.send_signal(signal.SIGTERM)
time.sleep(2)
w.kill()
out = w.stdout.read().decode() if w.stdout else ""
print(out.count("lease lost"), "'lease lost' lines in the worker log")
srv.stop()

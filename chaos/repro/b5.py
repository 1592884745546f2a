"""B5 (state written straight into Redis): job data nested 100,000 deep.

Before the fix: RecursionError (not a ValueError) escaped `_accept` and the worker exited.
Run from the repo root: .venv/bin/python chaos/repro/b5.py
"""

from __future__ import annotations

import time

import redis
from common import server, worker

from conveyor import Queue

srv = server()
r = redis.Redis.from_url(srv.url)
q = Queue("r", url=srv.url)
q.enqueue("work", {"s": 0}, id="deep")
r.hset("conveyor:{r}:job:deep", "data", "[" * 100_000 + "]" * 100_000)
w = worker(srv.url)
time.sleep(4)
print("worker exit code:", w.poll(), "| job:", r.hmget("conveyor:{r}:job:deep", "state", "error"))
w.kill()
srv.stop()

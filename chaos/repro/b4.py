"""B4: a record whose `attempts` is not an integer, claimed with three valid jobs.

Before the fix: claim.lua raised after ZPOPMIN; all four jobs stayed `waiting` in no index
(lost) and the worker exited with status 1.
Run from the repo root: .venv/bin/python chaos/repro/b4.py
"""

from __future__ import annotations

import time

import redis
from common import server, worker

from conveyor import Queue

srv = server()
r = redis.Redis.from_url(srv.url)
q = Queue("r", url=srv.url)
for i in range(4):
    q.enqueue("work", {"s": 0}, id=f"ok{i}")
r.hset("conveyor:{r}:job:ok0", "attempts", "many")  # corrupt the first one only
w = worker(srv.url)
time.sleep(4)
print("worker exit code:", w.poll())
for i in range(4):
    k = f"ok{i}"
    where = [name for name in ("ready", "active") if r.zscore(f"conveyor:{{r}}:{name}", k)]
    print(k, r.hget(f"conveyor:{{r}}:job:{k}", "state"), where)
w.kill()
srv.stop()

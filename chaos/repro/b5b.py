"""B5 through the public API: the deepest nesting the producer accepts.

Before the fix: the producer accepted depth 990 and every worker that claimed it died.
Run from the repo root: .venv/bin/python chaos/repro/b5b.py
"""

from __future__ import annotations

import time
from typing import Any

import redis
from common import server, worker

from conveyor import Queue
from conveyor.errors import ConveyorError

srv = server()
r = redis.Redis.from_url(srv.url)
q = Queue("r", url=srv.url)


def nested(n: int) -> Any:
    v: Any = []
    for _ in range(n):
        v = [v]
    return v


depth = None
for n in range(1000, 0, -10):
    try:
        q.enqueue("work", nested(n), id="deep")
        depth = n
        break
    except ConveyorError:
        continue
print("producer accepted depth", depth)
w = worker(srv.url)
time.sleep(4)
print("worker exit code:", w.poll(), "| job state:", r.hget("conveyor:{r}:job:deep", "state"))
w.kill()
srv.stop()

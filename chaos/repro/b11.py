"""B11: an enqueue re-sent by the caller after UncertainWriteError, while its job runs.

The documented retry ("enqueueing again with the same id is safe") stores a blocked twin when
the job is running, and the job runs twice. Run from the repo root:
.venv/bin/python chaos/repro/b11.py
"""

from __future__ import annotations

import time

from common import fault_proxy, server, worker

from conveyor import Queue
from conveyor.errors import UncertainWriteError

srv = server()
assert srv.port is not None
with fault_proxy(srv.port) as proxy:
    w = worker(srv.url, "r", 1)  # the worker talks to Redis directly
    q = Queue("r", url=proxy.url)  # the producer goes through the proxy
    q.enqueue("work", {"s": 0}, id="warm-up")  # loads the scripts on the server
    time.sleep(1.0)
    proxy.lose_replies(1.0)  # the enqueue is applied, its reply never arrives
    try:
        q.enqueue("work", {"s": 3}, id="retried")
        print("first enqueue: acknowledged")
    except UncertainWriteError as exc:
        print("first enqueue:", type(exc).__name__)
    proxy.lose_replies(0.0)
    for _ in range(100):  # until the worker runs it
        job = q.get("retried")
        if job is not None and job.state == "active":
            break
        time.sleep(0.05)
    print("job state before the re-send:", job and job.state)
    print("re-send with the same id:", q.enqueue("work", {"s": 3}, id="retried").outcome)
    time.sleep(8)
    events = [e.name for e in q.events(after="0-0", count=1000) if e.job_id == "retried"]
    print("events:", events)
    print("completed", events.count("completed"), "times")
    w.terminate()
    q.close()
srv.stop()

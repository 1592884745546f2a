"""B6: wait_result() with a timeout longer than redis-py's default 5 s socket timeout.

Before the fix: UncertainWriteError after 5.0 s instead of WaitTimeoutError after 8 s.
Run from the repo root: .venv/bin/python chaos/repro/b6.py
"""

from __future__ import annotations

import time

from common import server

from conveyor import Queue

srv = server()
q = Queue("r", url=srv.url)
q.enqueue("work", {"s": 0}, id="never-run")  # no worker: it never finishes
t = time.monotonic()
try:
    q.wait_result("never-run", timeout=8)
except Exception as e:
    took = time.monotonic() - t
    print(f"wait_result(timeout=8) -> {type(e).__name__} after {took:.1f} s: {str(e)[:80]}")
srv.stop()

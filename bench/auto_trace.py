"""Record what `--concurrency auto` reads on this machine, for the controller's tests:

    python -m bench.auto_trace [seconds] > tests/worker/data/auto_trace_<what>.json

A worker (in this process, on a thread) drains a CPU/IO mix of bench/execution_tasks.py
(a quarter CPU jobs in two children, the rest asyncio sleeps); prints its controller's
readings as JSON rows `[new limit, host CPU, own CPU, running]`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from conveyor.integrations.redis_server import RedisProcess
from conveyor.worker import Worker, WorkerSettings


def main(seconds: float) -> None:
    with tempfile.TemporaryDirectory() as work:
        server = RedisProcess(data_dir=Path(work) / "redis").start()
        os.environ["BENCH_REDIS_URL"] = server.url
        os.environ["BENCH_MARK_URL"] = server.url.rsplit("/", 1)[0] + "/1"
        from bench.execution_tasks import tasks

        try:
            tasks.queue().enqueue_many(
                [("cpu" if i % 4 == 0 else "io", None) for i in range(20_000)]
            )
            settings = WorkerSettings(
                auto_concurrency=True, min_concurrency=1, max_concurrency=12, processes=2
            )
            worker = Worker(tasks, url=server.url, settings=settings)
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_until_complete, args=(worker.run(),))
            thread.start()
            time.sleep(seconds)
            loop.call_soon_threadsafe(worker.stop)
            loop.call_soon_threadsafe(worker.stop)
            thread.join(60)
            assert worker._auto is not None
            rows = [[limit, round(r.host, 3), round(r.own, 3), r.running]
                    for _, limit, r in worker._auto.history]  # fmt: skip
            print(json.dumps(rows))
        finally:
            server.stop()


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 15.0)

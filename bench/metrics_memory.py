"""How much memory a queue's metrics history takes for a week, measured.

    .venv/bin/python -m bench.metrics_memory [--tasks 1,10]

A week is 169 hour keys of each kind (docs/protocol.md §14). Every minute is
busy (completed, failed and retried all counted) and every task fills every
run and wait time bucket: the most the history can hold. The hour keys are
written as record_metrics writes them, then measured with MEMORY USAGE.
"""

from __future__ import annotations

import argparse
import tempfile

import redis

from conveyor.integrations.redis_server import RedisProcess
from conveyor.metrics import BOUNDS, RUN, WAIT
from conveyor.protocol.keys import QueueKeys

HOURS = 7 * 24 + 1


def week_bytes(client: redis.Redis, tasks: int) -> tuple[int, int]:
    """Bytes of the counts keys and of the timings keys of a full week."""
    keys = QueueKeys("conveyor", f"bench-{tasks}")
    counts = timings = 0
    for hour in range(HOURS):
        client.hset(keys.metrics(hour), mapping={str(m): "1873 12 40" for m in range(60)})
        fields: dict[str, int] = {}
        for t in range(tasks):
            task = f"app.tasks.task_{t}"
            for kind in (RUN, WAIT):
                fields |= {f"{kind}{b}:{task}": 1000 + b for b in range(len(BOUNDS) + 1)}
                fields[f"{kind}s:{task}"] = 123_456_789_012
        client.hset(keys.timings(hour), mapping=fields)
        client.pexpire(keys.metrics(hour), 1000 * 3600 * 200)
        client.pexpire(keys.timings(hour), 1000 * 3600 * 200)
        counts += int(client.memory_usage(keys.metrics(hour)) or 0)
        timings += int(client.memory_usage(keys.timings(hour)) or 0)
    return counts, timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="1,10", help="task counts, comma-separated")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, RedisProcess(data_dir=tmp) as server:
        client = redis.Redis.from_url(server.url)
        version = client.info("server")["redis_version"]
        print(f"metrics history of one queue for a week (Redis {version}, worst case)")
        for tasks in (int(t) for t in args.tasks.split(",")):
            counts, timings = week_bytes(client, tasks)
            print(
                f"  {tasks:3d} task(s): counts {counts / 1024:7.1f} KiB, "
                f"timings {timings / 1024:8.1f} KiB, total {(counts + timings) / 1024:8.1f} KiB"
            )
        client.close()


if __name__ == "__main__":
    main()

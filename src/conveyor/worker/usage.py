"""What a worker process uses, for its self-description (docs/protocol.md §8.1):
resident memory now and CPU over the time since the last reading."""

from __future__ import annotations

import os
import resource
import sys
import threading
import time

# The shortest window CPU is measured over: the heartbeats of several queues read it
# within milliseconds of each other, and a window that short measures the beat itself.
WINDOW = 1.0


class Usage:
    """CPU as a share of one core since the previous reading at least WINDOW s
    before; a reading sooner than that repeats the last figure."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the heartbeats of several queues may read at once
        self._last = (time.monotonic(), time.process_time())
        self._percent = 0.0

    def cpu_percent(self) -> float:
        now = (time.monotonic(), time.process_time())
        with self._lock:
            wall, cpu = self._last
            elapsed = now[0] - wall
            if elapsed >= WINDOW:
                self._last = now
                self._percent = round(100 * (now[1] - cpu) / elapsed, 1)
            return self._percent


def rss_bytes() -> int:
    """Resident memory now (Linux /proc), else the peak the kernel reports."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


def process_usage(usage: Usage) -> dict[str, float | int]:
    """The fields `rss` (bytes) and `cpu` (percent of one core)."""
    return {"rss": rss_bytes(), "cpu": usage.cpu_percent()}

"""A terminal progress bar fed by the events stream (blocking reads, no polling)."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import TextIO

from conveyor.client.sync import Queue

FINISHED = ("completed", "failed")
ADDED = ("created", "waiting_children")  # a flow's parent is added waiting for its children


class ProgressBar:
    """`[#####-----]  4,210/10,000  42%  3,812 jobs/s  failed 3` on one line."""

    def __init__(self, total: int, *, stream: TextIO | None = None, width: int = 30) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stderr  # as it is now, not at import
        self.width = width
        self.started = time.monotonic()
        self.counts: Counter[str] = Counter()
        self._last_step = -1

    @property
    def done(self) -> int:
        return sum(self.counts[name] for name in FINISHED)

    def render(self) -> str:
        fraction = min(1.0, self.done / self.total) if self.total else 1.0
        filled = round(fraction * self.width)
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return (
            f"[{'#' * filled}{'-' * (self.width - filled)}] {self.done:>9,}/{self.total:,} "
            f"{fraction:4.0%}  {self.done / elapsed:8,.0f} jobs/s  "
            f"retried {self.counts['retried']:,}  failed {self.counts['failed']:,}"
        )

    def draw(self) -> None:
        """Redraw in place on a terminal; elsewhere (logs, CI) a line per 10%."""
        if self.stream.isatty():
            self.stream.write("\r" + self.render())
        else:
            step = self.done * 10 // max(self.total, 1)
            if step == self._last_step:
                return
            self._last_step = step
            self.stream.write(self.render() + "\n")
        self.stream.flush()

    def close(self) -> None:
        self.draw()
        if self.stream.isatty():
            self.stream.write("\n")


def follow(
    queue: Queue,
    bar: ProgressBar,
    *,
    after: str = "0-0",
    timeout: float = 600,
    alive: Callable[[], bool] = lambda: True,
    count_new: bool = False,
) -> str:
    """Count finished jobs from the events stream until `bar.total` are done,
    `timeout` passes, or `alive()` turns false; returns the last id read.
    With `count_new`, each job created meanwhile adds one to `bar.total`, and
    a total of 0 waits for the first job rather than ending at once."""
    deadline = time.monotonic() + timeout

    def unfinished() -> bool:
        return bar.done < bar.total or (count_new and bar.total == 0)

    last_draw = 0.0
    while unfinished() and time.monotonic() < deadline and alive():
        for event in queue.events(after=after, block=1.0, count=5000):
            after = event.stream_id
            bar.counts[event.name] += 1
            if count_new and event.name in ADDED:
                bar.total += 1
        if time.monotonic() - last_draw > 0.1:
            bar.draw()
            last_draw = time.monotonic()
    bar.close()
    return after

"""Python's cyclic garbage collector while a worker runs.

A worker at concurrency 100 or more keeps hundreds of jobs' objects alive at
once (contexts, coroutines, futures, decoded data), so at the interpreter's
default threshold (a young collection every 700 new container objects) they
outlive young collections, are promoted, and keep the older generations'
collections busy: with 512 slots, about a tenth of the worker's CPU went to
the collector, and a tenth of that at a threshold of 10,000. A larger young
threshold lets a job's objects die before a collection looks at them.
Reference counting frees everything that is not a cycle either way; the
threshold only sets how often cycles are looked for.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_holders = 0  # workers running in this process with a threshold set
_before = gc.get_threshold()  # the thresholds the first of them found (set again by _hold)


@contextmanager
def young_threshold(threshold: int | None) -> Iterator[None]:
    """While the block runs, young collections wait for at least `threshold`
    new objects (None: the interpreter's setting is left alone). Workers in
    one process share it: the first raises it, the last one out restores
    what the first found."""
    if threshold is None:
        yield
        return
    _hold(threshold)
    try:
        yield
    finally:
        _release()


def _hold(threshold: int) -> None:
    global _holders, _before
    with _lock:
        current = gc.get_threshold()
        if _holders == 0:
            _before = current
        _holders += 1
        if current[0] < threshold:
            gc.set_threshold(threshold, current[1], current[2])


def _release() -> None:
    global _holders
    with _lock:
        _holders -= 1
        if _holders == 0:
            gc.set_threshold(*_before)

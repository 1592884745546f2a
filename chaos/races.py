"""Producer processes that race on the same ids, and the check that the runs of one id
never overlapped (scenarios 15 and 23).

The racers are forked from the harness (conveyor is imported once), each with a client of its
own, and start together on a barrier: real processes, so the race is between separate
connections and interpreters, not threads of one process sharing a GIL.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import queue as queue_module
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from chaos.ledger import Entry, Ledger

_FORK = multiprocessing.get_context("fork")


@dataclass(frozen=True)
class Race:
    outcomes: list[str]  # one per enqueue call: created, updated, blocked, exists, or error ...
    racers: int  # processes that reported back


def _racer(
    url: str,
    queue: str,
    ids: Sequence[str],
    rounds: int,
    data: dict[str, Any],
    barrier: Any,
    out: Any,
    ledger_path: str | None,
) -> None:
    from chaos.harness import settings
    from conveyor import Queue

    outcomes: list[str] = []
    book = Ledger(ledger_path) if ledger_path else None
    client = Queue(queue, url=url, settings=settings())
    try:
        client.check()
        barrier.wait(60)
        for _ in range(rounds):
            for job_id in ids:
                sent = time.monotonic()
                try:
                    outcome = client.enqueue("work", data, id=job_id).outcome
                except Exception as exc:  # reported, never raised in a racer
                    outcomes.append(f"error {type(exc).__name__}")
                    continue
                if book is not None:  # extra: the outcome and when the call was sent
                    book.record("enq", job_id, 0, f"{outcome} {sent:.6f}")
                outcomes.append(outcome)
    finally:
        out.put(outcomes)
        client.close()
        if book is not None:
            book.close()


def race(
    url: str,
    queue: str,
    producers: int,
    ids: Sequence[str],
    data: dict[str, Any],
    *,
    rounds: int = 1,
    ledger_path: str | None = None,
    timeout: float = 120.0,
    before: Callable[[], object] | None = None,
) -> Race:
    """`producers` processes each enqueue every id of `ids`, `rounds` times, all starting at
    once; every acknowledged call is written to the ledger when `ledger_path` is given.
    `before` runs once every racer is connected and waiting, right before they are let go
    (forking and connecting 50 processes takes seconds on a busy machine)."""
    barrier = _FORK.Barrier(producers + 1)  # the last party is this process
    out = _FORK.Queue()
    procs = [
        _FORK.Process(
            target=_racer, args=(url, queue, list(ids), rounds, data, barrier, out, ledger_path)
        )
        for _ in range(producers)
    ]
    for proc in procs:
        proc.start()
    if before is not None:
        barrier_ready = _wait_parties(barrier, producers, timeout)
        before()
        if not barrier_ready:
            barrier.abort()
    # a racer that never arrived breaks the barrier: it reports no outcome, the others go on
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait(timeout)
    outcomes: list[str] = []
    racers = 0
    for _ in range(producers):
        try:
            outcomes.extend(out.get(timeout=timeout))
        except queue_module.Empty:
            break
        racers += 1
    for proc in procs:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
    return Race(outcomes, racers)


def _wait_parties(barrier: Any, parties: int, timeout: float) -> bool:
    """Until `parties` processes wait at `barrier` (bounded polling of its count)."""
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / 0.01) + 1):
        if barrier.n_waiting >= parties:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return False


@dataclass(frozen=True)
class Span:
    """One run of a job as the ledger shows it: from its start to its finish, or to the end of
    its process (inf: neither seen)."""

    pid: int
    attempt: int
    begin: float
    end: float
    begin_wall: float = 0.0  # time.time() at its start: comparable with Redis's stream ids


def run_spans(
    starts: Sequence[Entry], finishes: Sequence[Entry], kills: Sequence[Entry]
) -> list[Span]:
    """Each start paired with the first unused finish of the same process and attempt after it.
    A run without a finish ends at the first `kill` or `dead` entry of its process at or after
    its start. The harness writes `kill` before it signals and `dead` once the process is
    reaped: a start between the two (the victim claimed a job in that instant) ends at `dead`."""
    spans: list[Span] = []
    used: set[int] = set()
    ordered = sorted(enumerate(finishes), key=lambda pair: pair[1].mono)
    for st in sorted(starts, key=lambda e: e.mono):
        end = float("inf")
        for i, fin in ordered:
            mine = fin.pid == st.pid and fin.attempt == st.attempt and fin.mono >= st.mono
            if i not in used and mine:
                used.add(i)
                end = fin.mono
                break
        else:
            ends = [k.mono for k in kills if k.pid == st.pid and k.mono >= st.mono]
            if ends:
                end = min(ends)
        spans.append(Span(st.pid, st.attempt, st.mono, end, st.wall))
    return spans


def clashing(spans: Sequence[Span]) -> list[tuple[Span, Span]]:
    """Each run that began while an earlier run was still going, with that earlier run."""
    found: list[tuple[Span, Span]] = []
    for n, span in enumerate(spans):
        for prev in spans[:n]:
            if prev.begin <= span.begin < prev.end:
                found.append((prev, span))
                break
    return found


def overlaps(starts: Sequence[Entry], finishes: Sequence[Entry], kills: Sequence[Entry]) -> int:
    """How many runs of one job began while an earlier run of it was still going (`run_spans`
    says when each run ended)."""
    return len(clashing(run_spans(starts, finishes, kills)))


def after_a_stall(clash: tuple[Span, Span], stalls: Sequence[float]) -> bool:
    """Whether the earlier run of a clash lost its lease before the later one began: a
    `stalled` event of the id (`stalls`, wall seconds) between the two starts. A worker
    starved of CPU for longer than its lease (the storm's 100 processes on 2 cores) keeps a
    handler suspended until its next heartbeat cancels it, while the job runs elsewhere; the
    fencing check (no completion accepted twice) covers that run, not the overlap check."""
    earlier, later = clash
    return any(earlier.begin_wall <= at <= later.begin_wall + 0.001 for at in stalls)

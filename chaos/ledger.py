"""The ledger: a record outside Redis of what really happened.

Every line is one event, appended with one ``write(2)`` on an ``O_APPEND`` descriptor, so
lines from many processes never interleave:

    kind <TAB> job id <TAB> attempt <TAB> pid <TAB> monotonic s <TAB> wall s <TAB> extra

kinds: ``enq`` (an enqueue Redis acknowledged; extra = AOF size at the ack, when known),
``unsure`` (an enqueue that may or may not have been applied), ``start`` and ``finish`` (a
handler began / ran to its end), ``kill`` (a fault the harness injected; id = what).

Times are ``CLOCK_MONOTONIC`` (one clock for every process on the machine, and not faked by
libfaketime when ``DONT_FAKE_MONOTONIC=1``), so they compare across processes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Entry:
    kind: str
    id: str
    attempt: int
    pid: int
    mono: float
    wall: float
    extra: str


class Ledger:
    """Appends entries to one file; safe to share between processes."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._pid = os.getpid()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def line(kind: str, job_id: str, attempt: int = 0, extra: object = "", pid: int = 0) -> bytes:
        now_mono, now_wall = time.monotonic(), time.time()
        pid = pid or os.getpid()
        fields = (kind, job_id, attempt, pid, f"{now_mono:.6f}", f"{now_wall:.6f}", extra)
        return ("\t".join(map(str, fields)) + "\n").encode()

    def record(
        self, kind: str, job_id: str, attempt: int = 0, extra: object = "", *, pid: int = 0
    ) -> None:
        os.write(self._fd, self.line(kind, job_id, attempt, extra, pid=pid))

    def record_many(self, kind: str, job_ids: Iterable[str], extra: object = "") -> None:
        """Many entries of one kind at once (a batch enqueue's acknowledgement)."""
        chunk: list[bytes] = []
        for job_id in job_ids:
            chunk.append(self.line(kind, job_id, 0, extra))
            if len(chunk) >= 200:
                os.write(self._fd, b"".join(chunk))
                chunk = []
        if chunk:
            os.write(self._fd, b"".join(chunk))


def read(path: str | os.PathLike[str]) -> Iterator[Entry]:
    """Every complete entry of the ledger (a torn last line from a killed writer is skipped)."""
    with open(path, "rb") as handle:
        for raw in handle:
            if not raw.endswith(b"\n"):
                continue
            parts = raw.decode("utf-8", "replace").rstrip("\n").split("\t")
            if len(parts) != 7:
                continue
            kind, job_id, attempt, pid, mono, wall, extra = parts
            yield Entry(kind, job_id, int(attempt), int(pid), float(mono), float(wall), extra)

"""RESP packing for a command whose head repeats call after call: the head is
packed once, then only the tail per call. A one-job `enqueue_new` sends the
same script, keys and stream length every time; only the job's id, task and
data vary. Packing all twelve arguments with hiredis on every call, with the
tuple it takes, cost 1.4 µs against 0.8 µs for this tail (timeit).

The bytes are what `hiredis.pack_command` makes of the whole command
(tests/client/test_resp.py holds the two to that).
"""

from __future__ import annotations

from collections.abc import Sequence

Arg = str | int


def _bulk(arg: Arg) -> bytes:
    data = arg.encode("utf-8") if isinstance(arg, str) else str(arg).encode("ascii")
    return b"$%d\r\n%s\r\n" % (len(data), data)


def pack_head(head: Sequence[Arg], *, tail: int) -> bytes:
    """The array header of a command of len(head) + tail arguments, and its head."""
    return b"*%d\r\n" % (len(head) + tail) + b"".join([_bulk(arg) for arg in head])


def pack_tail(args: Sequence[str]) -> bytes:
    """The tail's arguments, to go after pack_head's bytes (tail = len(args))."""
    packed = b""
    for arg in args:  # written out: half the time of a join over _bulk
        data = arg.encode("utf-8")
        packed += b"$%d\r\n%s\r\n" % (len(data), data)
    return packed

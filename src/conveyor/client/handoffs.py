"""Carrying flow hand-offs and cancellations out of outboxes (docs/protocol.md
§14.5, §14.9), without I/O: `carry` yields the Redis calls to make, queue by
queue, and is driven by `carry_sync` or `carry_async`.

A drain reads a bounded batch of an outbox, applies its hand-offs with
flow_settle on each parent queue's slot and its cancellations with cancel on
each child's queue, and only then deletes the entries: a drainer that dies in
between leaves them for the next one, and applying an entry twice changes
nothing. A call that wrote to another outbox (a parent failing towards its
own parent, a cancelled child that is a parent) says so, and that outbox is
drained next, in the same carry: a tree of any depth over any queues settles
or is cancelled level after level in one go, never one level per heartbeat.
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from conveyor.client.transport import translated
from conveyor.protocol import flows, ops
from conveyor.protocol.keys import QueueKeys

BATCH = 200  # entries read, and children cancelled, per call
# A client's cancel, abort or remove carries its flow's work for at most this
# long (a subtree of many thousands); the queues' workers carry the rest.
CLIENT_BUDGET = 10.0


@dataclass(frozen=True, slots=True)
class Scripts:
    """Script calls for one queue, sent in one pipeline; the reply is theirs."""

    queue: str
    calls: tuple[ops.Call, ...]


@dataclass(frozen=True, slots=True)
class Command:
    """One plain command on one queue's slot (a read of an outbox, ...)."""

    queue: str
    args: tuple[Any, ...]


Step = Scripts | Command
Carry = Generator[Step, Any, int]


def carry(
    prefix: str, first: Iterable[str], *, events_maxlen: int, until: float | None = None,
    batch: int = BATCH,
) -> Carry:  # fmt: skip
    """Drain the outboxes of the queues `first`, and of every queue a call of
    this carry wrote to, until none holds work or `until` (a monotonic
    time) passed; returns how many entries were done."""
    todo: deque[str] = deque()
    queued: set[str] = set()

    def more(name: str) -> None:
        if name not in queued:
            queued.add(name)
            todo.append(name)

    for name in first:
        more(name)
    done = 0
    while todo:
        name = todo.popleft()
        queued.discard(name)
        keys = QueueKeys(prefix, name)
        raw = yield Command(name, ("XRANGE", keys.outbox, "-", "+", "COUNT", batch))
        entries = flows.decode_outbox(raw or [])
        hand_offs = [e for e in entries if e.op == ""]
        finished = yield from _settle(prefix, hand_offs, events_maxlen, more)
        left = False
        for entry in (e for e in entries if e.op == "cancel"):
            if (yield from _cancel(prefix, name, entry, events_maxlen, batch, more)):
                finished.append(entry.entry_id)
            else:
                left = True
        if finished:
            yield Command(name, ("XDEL", keys.outbox, *finished))
            done += len(finished)
        if len(entries) >= batch or left:
            more(name)
        if until is not None and time.monotonic() >= until:
            break
    return done


def _settle(
    prefix: str, hand_offs: Sequence[flows.HandOff], maxlen: int, more: Callable[[str], None]
) -> Generator[Step, Any, list[str]]:
    """Apply hand-offs on their parents' slots; the entry ids applied."""
    by_queue: dict[str, list[flows.HandOff]] = defaultdict(list)
    for hand_off in hand_offs:
        by_queue[flows.split_reference(hand_off.parent)[0]].append(hand_off)
    for name, items in by_queue.items():
        call = flows.flow_settle(QueueKeys(prefix, name), items, events_maxlen=maxlen)
        (reply,) = yield Scripts(name, (call,))
        if any(ops.marked(r) for r in reply):  # a parent failed towards its own parent
            more(name)
    return [h.entry_id for h in hand_offs]


def _cancel(
    prefix: str, name: str, entry: flows.HandOff, maxlen: int, batch: int,
    more: Callable[[str], None],
) -> Generator[Step, Any, bool]:  # fmt: skip
    """Cancel one batch of a cancelled parent's children (a child that is a
    parent leaves its own cancellation in its queue's outbox, drained next);
    True when none is left."""
    key = QueueKeys(prefix, name).cancelling(flows.split_reference(entry.parent)[1])
    refs = [ops.text(r) for r in (yield Command(name, ("SRANDMEMBER", key, batch))) or []]
    by_queue: dict[str, list[str]] = defaultdict(list)
    for ref in refs:
        queue_name, child_id = flows.split_reference(ref)
        by_queue[queue_name].append(child_id)
    for queue_name, ids in by_queue.items():
        keys = QueueKeys(prefix, queue_name)
        calls = tuple(ops.cancel(keys, i, events_maxlen=maxlen) for i in ids)
        if any(int(r) == 2 for r in (yield Scripts(queue_name, calls))):
            more(queue_name)
    if refs:
        yield Command(name, ("SREM", key, *refs))
    return int((yield Command(name, ("SCARD", key)))) == 0


class SyncPeer(Protocol):
    """What carry_sync needs of a queue: Queue has it."""

    @property
    def client(self) -> Any: ...

    @property
    def runner(self) -> Any: ...

    def check(self) -> None: ...


class AsyncPeer(Protocol):
    """What carry_async needs of a queue: AsyncQueue has it."""

    @property
    def client(self) -> Any: ...

    @property
    def runner(self) -> Any: ...

    async def check(self) -> None: ...


def carry_sync(peer: Callable[[str], SyncPeer], steps: Carry) -> int:
    """Run a carry with the queues `peer` gives by name. Each queue passes
    the protocol check (§10) before the carry's first call to it."""
    reply: Any = None
    try:
        while True:
            step = steps.send(reply)
            queue = peer(step.queue)
            queue.check()
            if isinstance(step, Scripts):
                reply = queue.runner.run_many(list(step.calls))
            else:
                with translated():
                    reply = queue.client.execute_command(*step.args)
    except StopIteration as end:
        return int(end.value)


async def carry_async(peer: Callable[[str], AsyncPeer], steps: Carry) -> int:
    """carry_sync on an event loop."""
    reply: Any = None
    try:
        while True:
            step = steps.send(reply)
            queue = peer(step.queue)
            await queue.check()
            if isinstance(step, Scripts):
                reply = await queue.runner.run_many(list(step.calls))
            else:
                with translated():
                    reply = await queue.client.execute_command(*step.args)
    except StopIteration as end:
        return int(end.value)

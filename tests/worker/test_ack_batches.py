"""The ack writer's batches (worker/acks.py): in turns, a turn's share at most.

Across a network the slots go round in turns, each a claim and then a write of its
outcomes with the next claim riding behind it. When two turns' jobs end before the
writer wakes, one write of both would bring back one turn's claim, and the other
turn's slots would wait a round trip more for the claim loop's own: the turns would
merge. So in turns each write carries at most a turn's share, and the turns stay apart.
(End to end through a slow link: test_lease_bounds.py.)
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from conveyor.worker.acks import AckBuffer, Ride
from conveyor.worker.execution import Success


class _Turns:
    """A claim loop in three turns of two slots that sends no claim."""

    turns = 3
    share = 2

    def __call__(self, acked: int) -> Ride | None:
        return None


def _buffer(*, wire: object | None) -> AckBuffer:
    # the runner's wire decides whether batches may be in flight at once (one
    # ordered connection); nothing is written here, so no connection is needed
    runner: Any = SimpleNamespace(wire=wire)
    core: Any = SimpleNamespace()
    acks = AckBuffer(runner, core, on_written=lambda job, what: None)
    acks.rider = _Turns()
    for n in range(5):
        acks.add(f"j{n}", "token", Success("null"))
    return acks


def _ids(batch: list[Any]) -> list[str]:
    return [job_id for job_id, _, _ in batch]


def test_in_turns_a_write_carries_a_turns_share_at_most() -> None:
    acks = _buffer(wire=object())
    assert acks.depth == 3
    batches = [_ids(acks._next_batch()) for _ in range(4)]
    assert batches == [["j0", "j1"], ["j2", "j3"], ["j4"], []]


def test_in_one_turn_a_write_carries_everything_pending() -> None:
    acks = _buffer(wire=None)  # redis-py's pool: one batch at a time
    assert acks.depth == 1
    assert _ids(acks._next_batch()) == ["j0", "j1", "j2", "j3", "j4"]
    assert acks._next_batch() == []

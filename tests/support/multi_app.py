"""Tasks of three queues in one app, for `conveyor worker --queues` (queue
names from $TEST_QUEUE; each run is noted in the file $TEST_MARK)."""

from __future__ import annotations

import os

from conveyor.client.tasks import Tasks

base = os.environ.get("TEST_QUEUE", "multi")
high = Tasks(f"{base}-high")
default = Tasks(f"{base}-default")
low = Tasks(f"{base}-low")


def _note(queue: str, data: int) -> None:
    with open(os.environ["TEST_MARK"], "a") as mark:
        mark.write(f"{queue} {data}\n")


@high.task
def urgent(data: int) -> None:
    _note("high", data)


@default.task
def normal(data: int) -> None:
    _note("default", data)


@low.task
def bulk(data: int) -> None:
    _note("low", data)

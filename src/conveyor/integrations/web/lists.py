"""Job lists filtered by task and error text. No index holds jobs by task or
error, so a filter reads the list in its own order, SCANNED ids at most, and
says when it stopped there."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from starlette.requests import Request

from conveyor.client.aio import AsyncQueue
from conveyor.job import FINISHED_STATES, Job, JobState

SCANNED = 5_000  # ids of one list a filter looks through
CHUNK = 500  # records read per round trip


@dataclass(frozen=True, slots=True)
class Filter:
    """A task name (exact) and error text (a case-insensitive substring)."""

    task: str = ""
    error: str = ""

    @classmethod
    def of(cls, request: Request) -> Filter:
        params = request.query_params
        return cls(params.get("task", "").strip(), params.get("error", "").strip())

    @property
    def any(self) -> bool:
        return bool(self.task or self.error)

    def matches(self, fields: Mapping[str, str]) -> bool:
        """Whether a record's `task` and `error` fields match."""
        if self.task and fields.get("task") != self.task:
            return False
        return not self.error or self.error.lower() in fields.get("error", "").lower()

    def query(self) -> dict[str, str]:
        """The filter as query parameters (for the pager's links)."""
        return {k: v for k, v in (("task", self.task), ("error", self.error)) if v}


@dataclass(frozen=True, slots=True)
class Found:
    rows: list[tuple[str, Job | None]]  # the page asked for
    total: int  # matches among those scanned
    scanned: int
    cut: bool  # the list is longer than SCANNED: later jobs were not looked at


async def filtered(
    queue: AsyncQueue, state: JobState, group: str | None, wanted: Filter, page: int, size: int
) -> Found:
    """The page `page` of the jobs of a list that match `wanted`."""
    matches: list[str] = []
    scanned, cut = 0, False
    while scanned < SCANNED:
        ids = await queue.job_ids(state, group=group, offset=scanned, limit=CHUNK,
                                  reverse=state in FINISHED_STATES)  # fmt: skip
        fields = await queue.job_fields(ids, "task", "error")
        matches += [i for i, f in zip(ids, fields, strict=True) if f and wanted.matches(f)]
        scanned += len(ids)
        if len(ids) < CHUNK:
            break
    else:
        cut = bool(await queue.job_ids(state, group=group, offset=scanned, limit=1,
                                       reverse=state in FINISHED_STATES))  # fmt: skip
    shown = matches[(page - 1) * size : page * size]
    return Found(list(zip(shown, await queue.get_many(shown), strict=True)), len(matches),
                 scanned, cut)  # fmt: skip

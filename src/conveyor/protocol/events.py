"""Entries of the events stream that name several jobs (docs/protocol.md §11), split into
what one entry per job would hold. Pure: shared by every reader of the stream."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

S = TypeVar("S", str, bytes)


def job_attempts(ids: S, attempts: S | None) -> list[tuple[S, S | None]]:
    """The (id, attempt) of each job of an entry's `ids` and `attempts` fields (both
    space-separated, in the same order; claim writes `attempts`, complete does not).
    Readers tolerate what they cannot use (§11): attempts that do not pair up with the
    ids are left out rather than guessed."""
    job_ids = ids.split()
    tries = attempts.split() if attempts is not None else []
    if len(tries) != len(job_ids):
        return [(job_id, None) for job_id in job_ids]
    return list(zip(job_ids, tries, strict=True))


def entry_job_ids(fields: Mapping[bytes, bytes]) -> list[bytes]:
    """The ids of the jobs a raw entry (bytes fields, as redis-py returns them) names: its
    `ids` field split, else its one `id`, else none (an entry of no job)."""
    many = fields.get(b"ids")
    if many is not None:
        return many.split()
    one = fields.get(b"id")
    return [one] if one is not None else []

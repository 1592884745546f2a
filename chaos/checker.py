"""The checker: the ledger (what was acknowledged and what ran) against Redis's final state.

Per scenario it reports, Jepsen total-queue style:

    jobs         acknowledged enqueues
    lost         acknowledged, never completed nor failed
    duplicates   jobs whose handler ran to its end more than once (a side effect twice)
    reruns       jobs whose handler started more than once
    double_acks  jobs Redis accepted more than one completion for (fencing broken), leaving
                 out ids enqueued again while they ran (a "blocked twin": a second run asked
                 for) when the ledger shows as many runs that finished one after the other
    unexpected   jobs that ran but were never enqueued (neither acknowledged nor unsure)
    recovered    jobs whose enqueue was unsure (no reply) and that ran anyway
    phantom      jobs Redis shows completed whose handler never reached its end
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from chaos.ledger import Entry
from conveyor.client.events import decode_entries
from conveyor.protocol.keys import QueueKeys

FINISHED = ("completed", "failed")


@dataclass(frozen=True, slots=True)
class JobView:
    state: str | None
    attempts: int
    stalls: int
    failures: int
    error: str | None
    result: str | None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def snapshot(client: redis.Redis, queue: str, ids: Iterable[str]) -> dict[str, JobView]:
    """Each job's record as Redis holds it now (state None: no record)."""
    keys = QueueKeys("conveyor", queue)
    ids = list(ids)
    out: dict[str, JobView] = {}
    fields = ("state", "attempts", "stalls", "failures", "error", "result")
    for i in range(0, len(ids), 1000):
        chunk = ids[i : i + 1000]
        pipe = client.pipeline(transaction=False)
        for job_id in chunk:
            pipe.hmget(keys.job(job_id), fields)
        for job_id, raw in zip(chunk, pipe.execute(), strict=True):
            state, attempts, stalls, failures, error, result = raw
            out[job_id] = JobView(
                _text(state), _int(attempts), _int(stalls), _int(failures), _text(error),
                _text(result),
            )  # fmt: skip
    return out


def events(client: redis.Redis, queue: str, *, limit: int = 5_000_000) -> Counter[tuple[str, str]]:
    """(event name, job id) counts over the whole events stream (paged, bounded)."""
    key = QueueKeys("conveyor", queue).events
    counts: Counter[tuple[str, str]] = Counter()
    after = "-"
    seen = 0
    for _ in range(limit // 10_000 + 1):
        page = client.xrange(key, min=after, max="+", count=10_000)
        if not page:
            break
        for event in decode_entries(page):  # an entry may name several jobs (§11)
            counts[(event.name, event.job_id)] += 1
        seen += len(page)
        after = "(" + _text(page[-1][0])  # type: ignore[operator]
        if len(page) < 10_000 or seen >= limit:
            break
    return counts


def stalled_at(
    client: redis.Redis, queue: str, *, limit: int = 1_000_000
) -> dict[str, list[float]]:
    """When (wall seconds, from the entry's id: Redis's clock) each job's lease was found
    expired: its `stalled` events, paged and bounded."""
    key = QueueKeys("conveyor", queue).events
    found: dict[str, list[float]] = {}
    after = "-"
    for _ in range(limit // 10_000 + 1):
        page = client.xrange(key, min=after, max="+", count=10_000)
        for entry_id, raw in page:
            if raw.get(b"event") == b"stalled":
                at = int(_text(entry_id).split("-")[0]) / 1000  # type: ignore[union-attr]
                found.setdefault(_text(raw.get(b"id")) or "", []).append(at)
        if len(page) < 10_000:
            break
        after = "(" + _text(page[-1][0])  # type: ignore[operator]
    return found


@dataclass
class Tally:
    jobs: int = 0
    lost: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    reruns: list[str] = field(default_factory=list)
    double_acks: list[str] = field(default_factory=list)
    twins: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    phantom: list[str] = field(default_factory=list)
    bad_rerun_attempts: list[str] = field(default_factory=list)
    states: Counter[str] = field(default_factory=Counter)
    starts: dict[str, list[Entry]] = field(default_factory=dict)
    finishes: dict[str, list[Entry]] = field(default_factory=dict)
    acked_at: dict[str, Entry] = field(default_factory=dict)
    view: dict[str, JobView] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "lost": len(self.lost),
            "duplicates": len(self.duplicates),
            "reruns": len(self.reruns),
            "double_acks": len(self.double_acks),
            "twin_runs": len(self.twins),
            "unexpected": len(self.unexpected),
            "recovered": len(self.recovered),
            "phantom": len(self.phantom),
            "bad_rerun_attempts": len(self.bad_rerun_attempts),
            "states": dict(self.states),
        }


def tally(
    entries: Sequence[Entry],
    client: redis.Redis,
    queue: str,
    *,
    ids: Iterable[str] | None = None,
) -> Tally:
    """Check one queue: `ids` (default: every id the ledger mentions) against Redis."""
    t = Tally()
    acked: dict[str, Entry] = {}
    unsure: set[str] = set()
    starts: dict[str, list[Entry]] = defaultdict(list)
    finishes: dict[str, list[Entry]] = defaultdict(list)
    for e in entries:
        if e.kind == "enq":
            acked.setdefault(e.id, e)
        elif e.kind == "unsure":
            unsure.add(e.id)
        elif e.kind == "start":
            starts[e.id].append(e)
        elif e.kind == "finish":
            finishes[e.id].append(e)
    wanted = set(ids) if ids is not None else set(acked) | unsure | set(starts)
    view = snapshot(client, queue, sorted(wanted))
    completions = events(client, queue)
    t.jobs = len(acked.keys() & wanted)
    for job_id in sorted(wanted):
        v = view[job_id]
        t.states[v.state or "missing"] += 1
        if job_id in acked and v.state not in FINISHED:
            t.lost.append(job_id)
        if len(finishes.get(job_id, ())) > 1:
            t.duplicates.append(job_id)
        runs = starts.get(job_id, [])
        if len(runs) > 1:
            t.reruns.append(job_id)
            later = sorted(runs, key=lambda e: e.mono)[1:]
            if any(e.attempt < 2 for e in later):
                t.bad_rerun_attempts.append(job_id)
        # two accepted completions are a fencing failure, unless the id was enqueued again
        # while it ran (a blocked twin: a second run that was asked for) AND the ledger shows
        # as many runs that finished one after the other: a twin runs only once the run
        # before it ended, so completions of runs that overlapped are fencing failures too
        accepted = completions[("completed", job_id)]
        if accepted > 1:
            proven = serial_runs(runs, finishes.get(job_id, []))
            twin = completions[("blocked", job_id)] > 0 and accepted <= proven
            (t.twins if twin else t.double_acks).append(job_id)
        if runs and job_id not in acked:
            (t.recovered if job_id in unsure else t.unexpected).append(job_id)
        if v.state == "completed" and not finishes.get(job_id):
            t.phantom.append(job_id)
    t.starts, t.finishes, t.acked_at, t.view = dict(starts), dict(finishes), acked, view
    return t


def serial_runs(starts: Sequence[Entry], finishes: Sequence[Entry]) -> int:
    """How many finished runs of one job the ledger shows one after the other (none
    overlapping another): each finish is paired with the latest earlier start of the same
    process and attempt, then the most intervals that do not overlap are counted."""
    used: set[int] = set()
    spans: list[tuple[float, float]] = []
    for fin in sorted(finishes, key=lambda e: e.mono):
        match = None
        for i, st in enumerate(starts):
            if i in used or st.pid != fin.pid or st.attempt != fin.attempt or st.mono > fin.mono:
                continue
            if match is None or st.mono > starts[match].mono:
                match = i
        if match is not None:
            used.add(match)
            spans.append((starts[match].mono, fin.mono))
    count, end = 0, -1.0
    for begin, finish in sorted(spans, key=lambda span: span[1]):
        if begin >= end:
            count, end = count + 1, finish
    return count


@dataclass(frozen=True)
class Orphan:
    """A job a killed or stopped worker held: started there before the fault, never finished
    there; `restarted` is the monotonic second of its next start elsewhere (None: never)."""

    fault: Entry
    job_id: str
    restarted: float | None


def orphans(entries: Sequence[Entry], t: Tally) -> list[Orphan]:
    """Every job each SIGKILL / SIGSTOP of the ledger left behind."""
    faults = [e for e in entries if e.kind == "kill" and e.extra in ("SIGKILL", "SIGSTOP")]
    found: list[Orphan] = []
    for fault in faults:
        for job_id, runs in t.starts.items():
            for run in runs:
                if run.pid != fault.pid or run.mono > fault.mono:
                    continue
                finished_there = any(
                    f.pid == fault.pid and f.mono >= run.mono for f in t.finishes.get(job_id, ())
                )
                if finished_there and fault.extra == "SIGKILL":
                    continue
                nxt = [r.mono for r in runs if r.mono > fault.mono and r.pid != fault.pid]
                if nxt or not finished_there:
                    found.append(Orphan(fault, job_id, min(nxt, default=None)))
    return found


def recovery(entries: Sequence[Entry], t: Tally) -> tuple[list[float], list[str]]:
    """For every orphan (above): the seconds from the fault to the job's next start elsewhere;
    and the jobs never restarted (a job the reaper failed at max_stalls is not one)."""
    delays: list[float] = []
    never: list[str] = []
    for o in orphans(entries, t):
        if o.restarted is not None:
            delays.append(o.restarted - o.fault.mono)
        elif t.view[o.job_id].state != "failed":
            never.append(o.job_id)
    return delays, never


@dataclass
class Check:
    what: str
    ok: bool
    detail: str = ""


@dataclass
class Result:
    """One scenario's outcome, as written to chaos/results/latest.json."""

    name: str
    jobs: int = 0
    lost: int = 0
    duplicates: int = 0
    unexpected: int = 0
    kills: int = 0
    max_recovery_s: float | None = None
    # the documented bound on `lost` where some loss is allowed (scenario 7), else None
    # (then the bound is 0): a reader of latest.json tells a pass from a loss without the docs
    lost_bound: int | None = None
    checks: list[Check] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    scale: str = "full"
    seed: int | None = None

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    def check(self, what: str, ok: bool, detail: object = "") -> bool:
        self.checks.append(Check(what, bool(ok), str(detail)))
        return bool(ok)

    def absorb(self, t: Tally) -> None:
        """Add a tally's counts (several queues or phases may feed one result)."""
        self.jobs += t.jobs
        self.lost += len(t.lost)
        self.duplicates += len(t.duplicates)
        self.unexpected += len(t.unexpected)
        for key, value in t.summary().items():
            if isinstance(value, int):
                self.metrics[key] = self.metrics.get(key, 0) + value

    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def as_json(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "jobs": self.jobs,
            "lost": self.lost,
            "duplicates": self.duplicates,
            "unexpected": self.unexpected,
            "kills": self.kills,
            "max_recovery_s": None
            if self.max_recovery_s is None
            else round(self.max_recovery_s, 3),
            "lost_bound": 0 if self.lost_bound is None else self.lost_bound,
            "passed": self.passed,
            "scale": self.scale,
            "seconds": round(self.seconds, 1),
            "seed": self.seed,
            "checks": [asdict(c) for c in self.checks],
            "metrics": self.metrics,
        }
        return json.loads(json.dumps(out, default=str))

    def report(self) -> str:
        lines = [
            f"{self.name}: {'PASS' if self.passed else 'FAIL'} jobs={self.jobs} lost={self.lost} "
            f"duplicates={self.duplicates} unexpected={self.unexpected} kills={self.kills} "
            f"max_recovery_s={self.max_recovery_s} ({self.seconds:.1f} s, seed {self.seed})"
        ]
        for c in self.checks:
            lines.append(
                f"  [{'ok' if c.ok else 'FAIL'}] {c.what}" + (f": {c.detail}" if c.detail else "")
            )
        if self.metrics:
            lines.append("  metrics: " + json.dumps(self.metrics, default=str)[:2000])
        return "\n".join(lines)

"""`--concurrency auto`: how many jobs a worker runs at once, aimed at throughput.

A feedback controller (after Temporal's resource-based slot tuner, but aimed
at completions rather than a CPU percentage). Every `tick` it reads the
host's CPU use, the share of it that this worker and its child processes
take, how many jobs ran and how many ended, and moves the limit between
`low` and `high`. It moves only while every slot is used (work waits):

- up while the cores have room: the room left under `full`, or, for jobs
  that hardly use the CPU, what stays under `band` of the host with their
  own share, worth half a job at its cost at least (this worker's CPU per
  running job, which does not move with the limit). Until its first step
  down it starts fast: it grants the jobs that fit at their cost, never more
  than doubling (short I/O jobs reach the maximum in a few seconds); after
  one, a slot every `confirm` ticks. CPU-bound jobs stop at about one per
  free core; I/O-bound ones climb on, whoever else keeps the host busy;
- by probes, when the cores are full or the room is under half a job: with
  the completions at this limit counted for `settle` ticks, it moves a tenth
  of the slots (one at least) and keeps the move only if it paid. Up pays
  when the completion rate rose by `payoff` of the share of slots added;
  down pays when it fell by less than `payoff` of the share taken away
  (slots that bring nothing only add latency and memory). A move that does
  not pay is undone, and the next probe, the other way, waits `patience`
  ticks; one that pays is tried again the same way. After a step down that
  paid, no rise for `cooldown` ticks.

The CPU readings are smoothed (an exponential average) so one noisy tick
moves nothing; probes judge rates over several ticks. `Controller` is pure
(tested on recorded and simulated inputs); `CpuProbe` reads psutil.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("conveyor.worker")


@dataclass(frozen=True, slots=True)
class Reading:
    host: float  # the host's CPU use, 0..1 of all its cores
    own: float  # this worker's and its children's, 0..1 of all the host's cores
    running: int  # jobs running during the tick (the most at once)
    completed: int | None = None  # runs that ended during the tick; None: not counted (no probes)


@dataclass(slots=True)
class Controller:
    low: int
    high: int
    full: float = 0.95  # the host's CPU at which its cores count as full
    band: float = 0.05  # of the host: what jobs that hardly use the CPU may take whatever it reads
    cooldown: int = 4  # ticks without a rise after a step down that paid
    smoothing: float = 0.5  # weight of the newest reading
    confirm: int = 2  # ticks in a row a rise must be warranted (after the first step down)
    probe_step: float = 0.1  # a probe's share of slots moved
    payoff: float = 0.25  # of the share of slots moved, the share of completions that must move
    settle: int = 2  # ticks of completions counted at a limit (the first one after a move left out)
    patience: int = 20  # ticks without a probe after one that did not pay
    limit: int = field(init=False)
    _host: float | None = field(default=None, init=False)
    _own: float | None = field(default=None, init=False)
    _cost: float | None = field(default=None, init=False)  # own CPU per running job
    _quiet: int = field(default=0, init=False)
    _ready: int = field(default=0, init=False)  # ticks in a row a rise was warranted
    _fell: bool = field(default=False, init=False)  # it stepped down once: careful rises from then
    _counts: list[int] = field(default_factory=list, init=False)  # completions per tick at limit
    _probe: tuple[int, float] | None = field(default=None, init=False)  # limit, rate before it
    _down: bool = field(default=False, init=False)  # the next probe's way
    _wait: int = field(default=0, init=False)  # ticks left without a probe

    def __post_init__(self) -> None:
        if not 1 <= self.low <= self.high:
            raise ValueError("need 1 <= low <= high")
        if not 0 < self.full <= 1.0:
            raise ValueError("need 0 < full <= 1")
        self.limit = self.low

    def step(self, reading: Reading) -> int:
        """Take one tick's reading; the new limit."""
        before = self.limit
        limit = self._step(reading)
        if limit != before:
            self._counts.clear()  # the completions of the new limit from now on
        elif reading.completed is not None:
            self._counts.append(reading.completed)
        self._wait = max(0, self._wait - 1)
        self._quiet = max(0, self._quiet - 1)
        return limit

    def _step(self, reading: Reading) -> int:
        self._host = self._average(self._host, reading.host)
        self._own = self._average(self._own, reading.own)
        if reading.running:  # the cost of a job does not change with the limit: no lag
            self._cost = self._average(self._cost, reading.own / reading.running)
        if self._probe is not None:
            self._judge_probe(reading)
        elif self._may_rise(reading):
            self._ready += 1
            if not self._fell:
                self.limit = min(self.high, self.limit + self._start_step(reading))
                self._ready = 0
            elif self._ready >= self.confirm:
                self.limit += 1
                self._ready = 0
        elif self._may_probe(reading):
            self._start_probe()
        else:
            self._ready = 0
        return self.limit

    def _budget(self, reading: Reading) -> float:
        """The CPU that more jobs may take: the host's room under `full` (by
        the smoothed and the latest reading), or, when this worker's own share
        is under `band`, what stays under it (jobs that hardly use the CPU)."""
        room = self.full - max(self._host or 0.0, reading.host)
        return max(room, self.band - (self._own or 0.0))

    def _may_rise(self, reading: Reading) -> bool:
        """Work waits (every slot was used) and the budget is worth half a job
        at its cost at least."""
        if self.limit >= self.high or self._quiet or reading.running < self.limit:
            return False
        return self._budget(reading) >= (self._cost or 0.0) / 2

    def _start_step(self, reading: Reading) -> int:
        """The jobs that fit the budget at their cost (one at least), but no
        more than the limit: it doubles at most."""
        if not self._cost:
            return self.limit
        return max(1, min(self.limit, round(self._budget(reading) / self._cost)))

    def _may_probe(self, reading: Reading) -> bool:
        """Work waits, there is room to move, and the completions at this limit
        are counted (`settle` ticks past the first)."""
        edge = self.low if self._down else self.high
        return (
            self.limit != edge
            and not self._wait
            and not (self._quiet and not self._down)
            and reading.running >= self.limit
            and reading.completed is not None
            and len(self._counts) > self.settle
        )

    def _start_probe(self) -> None:
        rate = sum(self._counts[1:]) / (len(self._counts) - 1)
        self._probe = (self.limit, rate)
        step = max(1, round(self.limit * self.probe_step))
        if self._down:
            self.limit = max(self.low, self.limit - step)
        else:
            self.limit = min(self.high, self.limit + step)
        self._ready = 0

    def _judge_probe(self, reading: Reading) -> None:
        """A probe's move stays if it paid (see the module's docstring)."""
        assert self._probe is not None
        before, rate = self._probe
        if reading.running < min(self.limit, before) or reading.completed is None:
            self._probe = None  # the work ran short: the probe says nothing; its move stays
            return
        if len(self._counts) < self.settle:
            return  # counting on
        now = (sum(self._counts[1:]) + reading.completed) / len(self._counts)
        moved = (self.limit - before) / before
        self._probe = None
        if now >= rate * (1 + self.payoff * moved):
            if self._down:
                self._fell = True
                self._quiet = self.cooldown + 1
            return  # it paid: the next probe goes the same way
        self.limit = before
        self._down = not self._down
        self._wait = self.patience + 1

    def _average(self, old: float | None, new: float) -> float:
        return new if old is None else self.smoothing * new + (1 - self.smoothing) * old


class CpuProbe:
    """CPU use since the previous read: the host's, and this process's plus
    its children's (process execution), as fractions of all the host's cores."""

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        self._me = psutil.Process()
        self._cores = psutil.cpu_count() or 1
        self._known: dict[int, psutil.Process] = {}
        psutil.cpu_percent()
        self._me.cpu_percent()

    def read(self) -> tuple[float, float]:
        host = self._psutil.cpu_percent() / 100
        own = self._me.cpu_percent()
        with contextlib.suppress(self._psutil.Error):
            for child in self._me.children(recursive=True):
                known = self._known.setdefault(child.pid, child)
                with contextlib.suppress(self._psutil.Error):
                    own += known.cpu_percent()  # a new child's first read is 0
        alive = {c.pid for c in self._me.children(recursive=True)}
        self._known = {p: c for p, c in self._known.items() if p in alive}
        return host, own / 100 / self._cores


class AutoConcurrency:
    """Runs the controller on the worker's loop; `limit` is read by the claim loop."""

    def __init__(
        self,
        controller: Controller,
        running: Callable[[], int],
        *,
        tick: float = 0.5,
        ended: Callable[[], int] | None = None,
    ) -> None:
        self.controller = controller
        self._running = running  # jobs running now
        self._ended = ended  # runs ended so far (completed or failed): the controller's probes
        self._tick = tick
        self._most = 0  # the most jobs running at once during this tick
        self.history: list[tuple[float, int, Reading]] = []  # (loop time, new limit, reading)

    @property
    def limit(self) -> int:
        return self.controller.limit

    def saw(self, running: int) -> None:
        """The claim loop tells how many jobs run (after each claim)."""
        self._most = max(self._most, running)

    async def run(self) -> None:
        probe = CpuProbe()
        loop = asyncio.get_running_loop()
        ended = None if self._ended is None else self._ended()
        while True:
            await asyncio.sleep(self._tick)
            host, own = probe.read()
            running = max(self._most, self._running())
            self._most = 0
            before = self.controller.limit
            completed = None
            if self._ended is not None and ended is not None:
                ended, last = self._ended(), ended
                completed = ended - last
            reading = Reading(host, own, running, completed)
            limit = self.controller.step(reading)
            self.history.append((loop.time(), limit, reading))
            del self.history[:-2000]
            if limit != before:
                log.info("concurrency %d -> %d (host CPU %.0f%%)", before, limit, host * 100)

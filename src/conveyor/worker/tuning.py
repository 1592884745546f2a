"""`--concurrency auto`: how many jobs a worker runs at once, from its CPU.

A feedback controller, after Temporal's resource-based slot tuner: every
`tick` it reads the host's CPU use and the share of it that this worker and
its child processes take, and moves the limit between `low` and `high`:

- up, when a reading warrants it: only when the worker used all its slots
  (there is work to take), when the CPU is under `target - band`, and when
  the host's CPU with one job more (at the cost of one of this worker's
  jobs: its own use per running job, which does not move when the limit
  does) stays under the target. Until its first fall it starts fast: every
  such tick it grants the jobs that fit under the target at their cost, but
  never more than doubles (a worker with short I/O jobs reaches its maximum
  in a few seconds, not one slot a second). After a fall it is careful: one
  slot at most every `confirm` ticks, each rise warranted that many ticks in
  a row (a bounded grant rate);
- down, when the CPU is over `target + band`, by the jobs over the target at
  their cost (one at least, a fifth of the limit at most), then no move for
  `cooldown` ticks: the jobs already claimed run on, so the CPU falls only
  later, and falling again at once would overshoot (64 slots fell to 4 in
  six seconds on a CPU/IO mix before);
- between the band's low edge and `ceiling` (the host nearly saturated), it
  probes, when it counts completions: every slot used and the completions
  at this limit counted for `settle` ticks, it grants a tenth more slots (one
  at least) and keeps them only if, over `settle` ticks at the new limit, the
  completion rate rose by at least `payoff` of the share of slots added
  (slots that bring work to a CPU with room to spare pay); else it gives
  them back and does not probe for `patience` ticks. While its last probe
  paid, a host over the band is its own doing and no reason to fall, unless
  the others' share of the host (the host's use less its own) has grown by
  more than the band since: then it falls as above. A CPU target of 90% alone left a tenth
  of the host idle where more slots still raised throughput (a CPU/IO mix
  held 53 slots at 88% of the host, 0.78 of the best fixed concurrency);
- else it holds. The dead band, the cooldown after a fall and a probe's
  bounded, checked step keep it from oscillating around the target; the CPU
  readings are smoothed (an exponential average) so one noisy tick moves nothing.

`Controller` is pure (tested on recorded inputs); `CpuProbe` reads psutil.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
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
    target: float = 0.9  # of the host's CPU; Temporal's tuner leaves the choice, up to 1.0
    band: float = 0.05
    cooldown: int = 4  # ticks without a rise after a fall
    smoothing: float = 0.5  # weight of the newest reading
    limit: int = field(init=False)
    _host: float | None = field(default=None, init=False)
    _cost: float | None = field(default=None, init=False)  # host CPU per running job
    _quiet: int = field(default=0, init=False)
    _ready: int = field(default=0, init=False)  # ticks in a row a rise was warranted
    _fell: bool = field(default=False, init=False)  # it fell once: careful steps from then on
    confirm: int = 2  # ticks in a row a rise must be warranted (after the first fall)
    ceiling: float = 0.98  # the host's CPU a probe may not take it past
    probe_step: float = 0.1  # a probe's share of more slots
    payoff: float = 0.4  # of the share of slots added, the share of completions it must add
    settle: int = 2  # ticks of completions counted at a limit (the first one after a move left out)
    patience: int = 20  # ticks without a probe after one that did not pay
    _counts: list[int] = field(default_factory=list, init=False)  # completions per tick at limit
    _probe: tuple[int, float] | None = field(default=None, init=False)  # limit, rate before it
    _paid: bool = field(default=False, init=False)  # the last probe paid: the load is ours
    _wait: int = field(default=0, init=False)  # ticks left without a probe
    _own: float | None = field(default=None, init=False)  # the smoothed own share
    _others: float = field(default=0.0, init=False)  # others' share when the last probe paid

    def __post_init__(self) -> None:
        if not 1 <= self.low <= self.high:
            raise ValueError("need 1 <= low <= high")
        if not self.target <= self.ceiling <= 1.0:
            raise ValueError("need target <= ceiling <= 1")
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
        return limit

    def _step(self, reading: Reading) -> int:
        host = self._host = self._average(self._host, reading.host)
        own = self._own = self._average(self._own, reading.own)
        if reading.running:  # the cost of a job does not change with the limit: no lag
            self._cost = self._average(self._cost, reading.own / reading.running)
        # the load over the band is this worker's doing: a probe runs, or the last one paid
        # and the others' share of the host has not grown since
        others = host - own
        ours = self._probe is not None or (self._paid and others <= self._others + self.band)
        if self._probe is not None and host > self.ceiling:
            self._give_back()  # a probe too far: back to where it started
        elif (
            host > self.target + self.band
            and not ours
            and self.limit > self.low
            and not self._quiet
        ):
            self.limit = max(self.low, self.limit - self._fall(host))
            self._quiet = self.cooldown + 1
            self._fell = True
            self._paid = False
        elif self._probe is not None:
            self._judge_probe(reading)
        elif self._may_rise(host, reading):
            self._ready += 1
            if not self._fell:
                self.limit = min(self.high, self.limit + self._start_step(host, reading))
                self._ready = 0
            elif self._ready >= self.confirm:
                self.limit += 1
                self._ready = 0
        elif self._may_probe(host, reading):
            rate = sum(self._counts[1:]) / (len(self._counts) - 1)
            self._probe = (self.limit, rate)
            self.limit = min(self.high, self.limit + max(1, round(self.limit * self.probe_step)))
            self._ready = 0
        else:
            self._ready = 0
        self._quiet = max(0, self._quiet - 1)
        return self.limit

    def _may_probe(self, host: float, reading: Reading) -> bool:
        """Work waits, the host is not saturated, and the completions at this
        limit are counted (`settle` ticks past the first)."""
        return (
            self.limit < self.high
            and not self._quiet
            and not self._wait
            and reading.running >= self.limit
            and host < self.ceiling
            and reading.completed is not None
            and len(self._counts) > self.settle
        )

    def _judge_probe(self, reading: Reading) -> None:
        """A probe's slots stay if the completion rate rose with them."""
        assert self._probe is not None
        before, rate = self._probe
        if reading.running < self.limit or reading.completed is None:
            self._probe = None  # the work ran short: the probe says nothing; its slots stay
            return
        if len(self._counts) < self.settle:
            return  # counting on
        now = (sum(self._counts[1:]) + reading.completed) / len(self._counts)
        added = (self.limit - before) / before
        if now >= rate * (1 + self.payoff * added):
            self._probe = None
            self._paid = True
            self._others = max(0.0, (self._host or 0.0) - (self._own or 0.0))
        else:
            self._give_back()

    def _give_back(self) -> None:
        """The probe's slots did not pay: back to the limit before it, and no
        probe for `patience` ticks."""
        assert self._probe is not None
        self.limit = self._probe[0]
        self._probe = None
        self._wait = self.patience + 1

    def _fall(self, host: float) -> int:
        """The jobs over the target at their cost (one at least), but a fifth
        of the limit at most: the excess may not be ours."""
        most = max(1, math.ceil(self.limit / 5))
        if not self._cost:
            return most
        return min(most, max(1, math.ceil((host - self.target) / self._cost)))

    def _start_step(self, host: float, reading: Reading) -> int:
        """The jobs that fit under the target at their cost (one at least),
        but no more than the limit: it doubles at most."""
        if not self._cost:
            return self.limit
        room = (self.target - max(host, reading.host)) / self._cost
        return max(1, min(self.limit, math.floor(room)))

    def _average(self, old: float | None, new: float) -> float:
        return new if old is None else self.smoothing * new + (1 - self.smoothing) * old

    def _may_rise(self, host: float, reading: Reading) -> bool:
        """Work waits (every slot was used), the CPU is under the band, and
        one job more, at its cost, keeps the latest reading under the target."""
        if self.limit >= self.high or self._quiet or reading.running < self.limit:
            return False
        now = max(host, reading.host)
        return host < self.target - self.band and now + (self._cost or 0.0) <= self.target


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

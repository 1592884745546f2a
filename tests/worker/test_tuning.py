"""--concurrency auto: the controller on recorded and simulated inputs (pure,
no clock), then once end to end in a real worker."""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path

import pytest

from conveyor import Queue
from conveyor.client.tasks import Tasks
from conveyor.errors import ConfigurationError
from conveyor.worker import WorkerSettings
from conveyor.worker.tuning import Controller, Reading
from support.workers import WorkerRunner, wait_until


def _run(controller: Controller, cost: float, ticks: int, noise: float = 0.0) -> list[int]:
    """A closed loop: every slot is used, each running job takes `cost` of
    the host's CPU (plus seeded noise)."""
    rng = random.Random(7)
    limits = []
    for _ in range(ticks):
        running = controller.limit
        host = min(1.0, running * cost + rng.uniform(-noise, noise))
        limits.append(controller.step(Reading(max(0.0, host), running * cost, running)))
    return limits


def _turns(limits: list[int]) -> int:
    """How often the limit changed direction."""
    moves = [b - a for a, b in zip(limits, limits[1:], strict=False) if b != a]
    return sum(1 for a, b in zip(moves, moves[1:], strict=False) if (a > 0) != (b > 0))


def test_cpu_bound_jobs_settle_where_one_more_would_pass_the_target() -> None:
    limits = _run(Controller(target=0.8, low=1, high=16), cost=0.3, ticks=60)
    assert set(limits) == {2}  # 2 x 0.3 = 0.6; a third would make 0.9 > 0.8


def test_io_bound_jobs_start_fast_doubling_at_most_to_the_maximum() -> None:
    limits = _run(Controller(target=0.8, low=1, high=40), cost=0.01, ticks=30)
    assert limits[:7] == [2, 4, 8, 16, 32, 40, 40]
    assert set(limits[5:]) == {40}


def test_the_fast_start_grants_only_the_jobs_that_fit_under_the_target() -> None:
    limits = _run(Controller(target=0.8, low=1, high=64), cost=0.07, ticks=6)
    assert limits == [2, 4, 8, 11, 11, 11]  # 8 x 0.07 = 0.56: 3 more fit under 0.8


def test_after_a_fall_it_rises_one_slot_per_two_ticks() -> None:
    controller = Controller(target=0.8, low=1, high=40, cooldown=0)
    controller.limit = 10
    controller.step(Reading(host=0.95, own=0.5, running=10))  # a fall: careful from now on
    limits = [controller.step(Reading(host=0.2, own=0.1, running=controller.limit))]
    limits += [
        controller.step(Reading(host=0.2, own=0.1, running=controller.limit)) for _ in range(5)
    ]
    assert limits == [8, 9, 9, 10, 10, 11]


def test_noisy_readings_do_not_make_it_oscillate() -> None:
    limits = _run(Controller(target=0.8, low=1, high=32), cost=0.07, ticks=400, noise=0.08)
    settled = limits[100:]  # noise of +-0.08 is more than one job's 0.07: some dither is due
    assert min(settled) >= 10 and max(settled) <= 12  # 11 x 0.07 = 0.77
    assert _turns(settled) <= 12  # a correction every 25 ticks or more, not a saw-tooth


def test_a_busy_host_makes_it_fall_by_a_fifth_then_wait() -> None:
    controller = Controller(target=0.8, low=2, high=40, cooldown=4)
    controller.limit = 20
    assert controller.step(Reading(host=0.97, own=0.5, running=20)) == 16
    for _ in range(4):  # the cooldown: no rise while it lasts, though the CPU is low now
        assert controller.step(Reading(host=0.1, own=0.05, running=16)) == 16
    assert controller.step(Reading(host=0.1, own=0.05, running=16)) == 16  # confirming
    assert controller.step(Reading(host=0.1, own=0.05, running=16)) == 17


def test_a_host_that_stays_busy_makes_it_fall_once_per_cooldown_not_every_tick() -> None:
    """Jobs already claimed keep the CPU busy for a while after a fall: falling
    again at every reading would take 64 slots down to a handful."""
    controller = Controller(low=1, high=64, cooldown=4)
    controller.limit = 64
    limits = []
    for _ in range(12):  # its jobs take 0.9 of the host: each costs 0.9 / limit
        limits.append(controller.step(Reading(host=0.99, own=0.9, running=controller.limit)))
    assert limits == [57, 57, 57, 57, 57, 51, 51, 51, 51, 51, 45, 45]


def test_it_holds_in_the_band_and_without_demand() -> None:
    controller = Controller(target=0.8, low=1, high=10)
    controller.limit = 5
    for host in (0.76, 0.8, 0.84, 0.78):
        assert controller.step(Reading(host=host, own=0.1, running=5)) == 5
    idle = Controller(target=0.8, low=1, high=10)
    idle.limit = 5
    for _ in range(10):  # slots unused: no reason to grant more
        assert idle.step(Reading(host=0.05, own=0.01, running=3)) == 5


def test_readings_recorded_on_a_saturated_host_keep_it_at_its_minimum() -> None:
    """A real trace (`python -m bench.auto_trace`, 2 cores that other processes kept at
    100%, the worker's own share about 5%): however little its jobs cost, a
    host over the target gets no more work from this worker."""
    trace = json.loads(
        (Path(__file__).parent / "data" / "auto_trace_saturated_host.json").read_text()
    )
    controller = Controller(low=1, high=12)  # the default target
    limits = [controller.step(Reading(host, own, running)) for _, host, own, running in trace]
    assert len(limits) > 10 and set(limits) == {1}


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ConfigurationError):
        WorkerSettings(auto_concurrency=True, min_concurrency=5, max_concurrency=2)


def test_a_worker_with_auto_concurrency_follows_its_controller(
    redis_url: str, queue_name: str, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    """End to end on whatever this machine's CPU does: the worker claims
    within the controller's limit, which moves within its bounds at the
    bounded rate, and only up while the host's CPU is under the band."""
    tasks = Tasks(queue_name, url=redis_url)
    most = [0]

    @tasks.task
    async def waits(data: None) -> None:
        jobs = worker.worker._jobs
        assert jobs is not None and auto is not None
        most[0] = max(most[0], jobs.in_flight - auto.limit)
        await asyncio.sleep(0.05)

    jobs = [waits.enqueue(None) for _ in range(300)]
    worker = worker_runner.start(tasks, auto_concurrency=True, min_concurrency=2, max_concurrency=6)
    auto = worker.worker._auto
    assert auto is not None
    for job in jobs:
        sync_queue.wait_result(job.id, timeout=120)
    wait_until(lambda: len(auto.history) >= 4, timeout=30)
    limits = [2, *(limit for _, limit, _ in auto.history)]
    assert all(2 <= n <= 6 for n in limits)
    assert all(b <= 2 * a for a, b in zip(limits, limits[1:], strict=False))  # doubles at most
    # it rises only with every slot in use and the host under the ceiling: a rise keeps the
    # latest reading under the target, a probe the smoothed one under the ceiling (README);
    # the smoothed reading recomputed as the controller does (a busy host may read 0.8-0.9)
    control = auto.controller
    smoothed: float | None = None
    before = 2
    for _, after, reading in auto.history:
        smoothed = reading.host if smoothed is None else (
            control.smoothing * reading.host + (1 - control.smoothing) * smoothed
        )
        if after > before:
            assert reading.running >= before
            assert reading.host <= control.target or smoothed < control.ceiling
        before = after
    # a claim can take a job more than the limit only when the limit just fell
    assert most[0] <= 1 or min(limits) < max(limits)


def test_a_heavy_job_takes_the_room_of_several_light_ones(
    redis_url: str, queue_name: str, sync_queue: Queue, worker_runner: WorkerRunner
) -> None:
    tasks = Tasks(queue_name, url=redis_url)
    spans: dict[str, list[tuple[float, float]]] = {"heavy": [], "light": []}

    @tasks.task(size=4)
    async def heavy(data: None) -> None:
        begin = time.monotonic()
        await asyncio.sleep(0.3)
        spans["heavy"].append((begin, time.monotonic()))

    @tasks.task
    async def light(data: None) -> None:
        begin = time.monotonic()
        await asyncio.sleep(0.1)
        spans["light"].append((begin, time.monotonic()))

    jobs = [heavy.enqueue(None), *(light.enqueue(None) for _ in range(8)), heavy.enqueue(None)]
    worker_runner.start(tasks, concurrency=4)
    for job in jobs:
        sync_queue.wait_result(job.id, timeout=30)
    for start, end in spans["heavy"]:  # nothing ran beside a heavy job
        assert not [s for s, e in spans["light"] if s < end and e > start]
    overlaps = max(
        sum(1 for s2, e2 in spans["light"] if s2 < e and e2 > s) for s, e in spans["light"]
    )
    assert overlaps >= 2  # light jobs did share the room


def _mix(
    controller: Controller,
    ticks: int,
    *,
    per_slot: float,
    knee: int,
    cost: float,
    noise: float,
    others: float = 0.0,
) -> list[int]:
    """A closed loop with completions: every slot is used; the completions of a
    tick grow with the slots up to `knee` (then no more: the slots over it wait),
    each slot takes `cost` of the host up to the knee, other processes take
    `others`; seeded noise on both."""
    rng = random.Random(11)
    limits = []
    for _ in range(ticks):
        running = controller.limit
        busy = min(running, knee)
        host = min(1.0, others + busy * cost + rng.uniform(-noise, noise))
        done = round(busy * per_slot * (1 + rng.uniform(-noise, noise)))
        limits.append(controller.step(Reading(max(0.0, host), busy * cost, running, done)))
    return limits


def test_slots_that_raise_completions_are_kept_past_the_cpu_target() -> None:
    """A CPU/IO mix (recorded shape: 53 slots held the host at 88%, and 64 did
    more): the CPU rule stops under the band, the probes go on while each
    tenth more slots brings more completions, up to the maximum."""
    controller = Controller(low=1, high=64)
    limits = _mix(controller, 80, per_slot=8.0, knee=100, cost=0.014, noise=0.01, others=0.07)
    assert max(limits[:6]) <= 60  # (0.9 - 0.07) / 0.014 = 59: where the CPU rule alone stops
    assert limits[-1] == 64 and limits.index(64) < 20  # reached within 10 s of 0.5 s ticks
    assert set(limits[limits.index(64) :]) == {64}  # and kept
    assert _turns(limits) == 0  # never down on the way


def test_probes_stop_short_of_a_saturated_host_without_a_saw_tooth() -> None:
    """Each slot more still adds completions, but the host reaches its ceiling
    near 66 slots: a probe that takes it past is given back at once, none
    starts over the ceiling, and its own load there is no reason to fall."""
    controller = Controller(low=1, high=128)
    limits = _mix(controller, 400, per_slot=8.0, knee=200, cost=0.014, noise=0.01, others=0.05)
    assert 74 not in limits[15:]  # the probe to 74 (host at 1.0) was given back at once
    settled = limits[20:]
    assert min(settled) >= 60 and max(settled) <= 68  # (0.98 - 0.05) / 0.014 = 66
    assert _turns(settled) == 0


def test_a_probe_that_brings_no_completions_is_given_back_and_not_tried_again_soon() -> None:
    """Past the knee (slots wait on a saturated CPU) more slots bring nothing:
    the probe's slots go back, and the next probe waits `patience` ticks."""
    controller = Controller(low=1, high=200, patience=20)
    limits = _mix(controller, 120, per_slot=8.0, knee=58, cost=0.0155, noise=0.0)
    assert min(limits[60:]) >= 58 - 1  # settles at the knee (its probe given back)
    assert max(limits[60:]) <= 64  # a probe at most a tenth over it
    probes = [b for a, b in zip(limits, limits[1:], strict=False) if b > a and a >= 58]
    assert 1 <= len(probes) <= 120 // 20  # one per patience at most


def test_after_a_probe_paid_it_falls_only_when_others_take_more_of_the_host() -> None:
    """Over the band by its own load (a probe paid at it) it holds, even at
    100%; when the others' share (host less its own) grows, it falls."""
    controller = Controller(low=1, high=64, cooldown=2)
    controller.limit = 50
    controller._paid, controller._others = True, 0.05  # a probe paid with others at 5%
    for _ in range(5):
        assert controller.step(Reading(host=1.0, own=0.94, running=50)) == 50
    fallen = controller.step(Reading(host=1.0, own=0.7, running=50))  # others: 0.3 at once
    fallen = controller.step(Reading(host=1.0, own=0.7, running=50))  # smoothed: over the band
    assert fallen < 50 and not controller._paid
    controller = Controller(low=1, high=64, cooldown=2)
    controller.limit = 50  # no probe paid: over the band is over the target
    assert controller.step(Reading(host=0.97, own=0.9, running=50, completed=400)) < 50


def test_a_probe_with_short_work_says_nothing_and_keeps_its_slots() -> None:
    controller = Controller(low=1, high=64)
    controller.limit = 40
    for _ in range(3):  # in the band, every slot used, completions counted
        controller.step(Reading(host=0.87, own=0.8, running=40, completed=300))
    assert controller.step(Reading(host=0.87, own=0.8, running=40, completed=300)) == 44
    assert controller.step(Reading(host=0.87, own=0.8, running=30, completed=100)) == 44
    assert not controller._paid and controller._probe is None


def test_without_completion_counts_it_never_probes() -> None:
    controller = Controller(low=1, high=64)
    controller.limit = 40
    for _ in range(30):
        assert controller.step(Reading(host=0.87, own=0.8, running=40)) == 40


def test_a_ceiling_under_the_target_is_refused() -> None:
    with pytest.raises(ValueError):
        Controller(low=1, high=4, target=0.9, ceiling=0.8)

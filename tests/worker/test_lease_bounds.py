"""Issue 15, defects 2 and 3: the leases a worker holds are bounded by its
concurrency, and its heartbeat keeps a fixed cadence, both through a proxy
that adds latency (chaos/proxy.py), measured on Redis itself."""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections.abc import Iterator

import pytest
import redis
from chaos.proxy import FaultProxy

from conveyor import Queue
from conveyor.client.tasks import Tasks
from support.workers import WorkerRunner, wait_until


@pytest.fixture
def proxy(redis_client: redis.Redis) -> Iterator[FaultProxy]:
    port = redis_client.connection_pool.connection_kwargs["port"]
    with FaultProxy(port, seed=15) as fault_proxy:
        yield fault_proxy


class Sampler(threading.Thread):
    """Reads one value from Redis every few milliseconds until stopped."""

    def __init__(self, read: object) -> None:
        super().__init__(daemon=True)
        self.read = read
        self.samples: list[tuple[float, object]] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(0.002):
            self.samples.append((time.monotonic(), self.read()))  # type: ignore[operator]

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


def test_a_worker_never_holds_more_leases_than_its_concurrency(
    proxy: FaultProxy, redis_client: redis.Redis, queue_name: str
) -> None:
    # Latency makes every acknowledgement take a while: finished jobs then wait
    # for it while the worker could claim more. Before the fix: 8 leases at
    # concurrency 4 (claimed + running + awaiting acknowledgement).
    done, most, samples = _drain_through_latency(proxy, redis_client, queue_name, 200)
    assert sorted(done) == list(range(200))
    assert samples > 100
    assert 1 <= most <= 4, f"{most} leases held at once with concurrency 4"


def _drain_through_latency(
    proxy: FaultProxy, redis_client: redis.Redis, queue_name: str, jobs: int, concurrency: int = 4
) -> tuple[list[int], int, int]:
    """`jobs` quick jobs run by a worker of `concurrency` through 20-40 ms each
    way; what ran, the most leases sampled on Redis at once, and the samples."""
    proxy.set_latency(0.02, 0.04)
    tasks = Tasks(queue_name, url=proxy.url)
    done: list[int] = []

    @tasks.task
    async def quick(n: int) -> None:
        done.append(n)

    producer = Queue(queue_name, url=f"redis://127.0.0.1:{proxy.upstream_port}/0")
    keys = producer.core.keys
    sampler = Sampler(lambda: redis_client.zcard(keys.active))
    producer.enqueue_many([("quick", n) for n in range(jobs)])
    runner = WorkerRunner(proxy.url)
    sampler.start()
    try:
        runner.start(tasks, concurrency=concurrency, lease=10)
        wait_until(lambda: len(done) == jobs, timeout=120)
        wait_until(lambda: redis_client.zcard(keys.active) == 0, timeout=30)
    finally:
        sampler.stop()
        runner.stop_all()
        producer.close()
    most = max(int(value) for _, value in sampler.samples)  # type: ignore[call-overload]
    return done, most, len(sampler.samples)


def test_heartbeats_keep_their_cadence_under_latency(
    proxy: FaultProxy, redis_client: redis.Redis, queue_name: str
) -> None:
    # 150 ms each way: a beat plus its reap take about 0.6 s. The beat must come
    # every lease / 3 = 0.5 s all the same, not every 0.5 s + 0.6 s.
    proxy.set_latency(0.15, 0.15)
    tasks = Tasks(queue_name, url=proxy.url)
    with Queue(queue_name, url=f"redis://127.0.0.1:{proxy.upstream_port}/0") as producer:
        keys = producer.core.keys
    runner = WorkerRunner(proxy.url)
    handle = runner.start(tasks, concurrency=1, lease=1.5)
    worker_key = keys.workers
    sampler = Sampler(lambda: redis_client.zscore(worker_key, handle.worker.id))
    sampler.start()
    try:
        wait_until(lambda: len({v for _, v in sampler.samples if v is not None}) >= 9, 60)
    finally:
        sampler.stop()
        runner.stop_all()
    beats: list[float] = []
    last = None
    for at, value in sampler.samples:
        if value is not None and value != last:
            beats.append(at)
            last = value
    gaps = [b - a for a, b in zip(beats[1:], beats[2:], strict=False)]  # the first may be partial
    assert len(gaps) >= 6
    assert statistics.median(gaps) < 0.65, f"beats every {statistics.median(gaps):.2f} s: {gaps}"
    assert max(gaps) < 1.0, gaps  # a lease of 1.5 s keeps a margin of at least half a lease


def test_a_claim_rides_behind_the_acknowledgements_when_every_slot_awaits_one(
    proxy: FaultProxy, redis_client: redis.Redis, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Through 20-40 ms each way, a worker whose four slots all wait for their
    # acknowledgement sends its next claim in the same pipeline (protocol §8
    # step 5): one round trip per turn of the slots instead of two, and never
    # more than four leases (sampled on Redis).
    from conveyor.worker import runtime

    claims: list[int] = []
    rides: list[int] = []
    own_claim, own_ride = runtime.Worker._claim, runtime.Worker._ride

    async def counted_claim(self: runtime.Worker, count: int, lane: object = None) -> object:
        claims.append(count)
        return await own_claim(self, count, lane)  # type: ignore[arg-type]

    def counted_ride(self: runtime.Worker, acked: int) -> object:
        ride = own_ride(self, acked)
        if ride is not None:
            rides.append(acked)
        return ride

    monkeypatch.setattr(runtime.Worker, "_claim", counted_claim)
    monkeypatch.setattr(runtime.Worker, "_ride", counted_ride)
    done, most, _ = _drain_through_latency(proxy, redis_client, queue_name, 120)
    assert sorted(done) == list(range(120))
    assert len(rides) >= 20, (len(rides), len(claims))  # 30 turns of four slots
    assert len(claims) < len(rides), (len(rides), len(claims))
    assert 1 <= most <= 4, f"{most} leases held at once with concurrency 4"


def _count_writes_in_flight(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Patch the ack writer to note the most batches of outcomes in flight at
    once; returns [most]."""
    from conveyor.worker import acks

    most = [0]
    writing = [0]
    own_write = acks.AckBuffer._write

    async def counted_write(self: acks.AckBuffer, batch: list[acks.Outcome]) -> None:
        writing[0] += 1
        most[0] = max(most[0], writing[0])
        try:
            await own_write(self, batch)
        finally:
            writing[0] -= 1

    monkeypatch.setattr(acks.AckBuffer, "_write", counted_write)
    return most


def _count_batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Patch the ack writer to note the size of every batch it writes."""
    from conveyor.worker import acks

    sizes: list[int] = []
    own_write = acks.AckBuffer._write

    async def noted(self: acks.AckBuffer, batch: list[acks.Outcome]) -> None:
        sizes.append(len(batch))
        await own_write(self, batch)

    monkeypatch.setattr(acks.AckBuffer, "_write", noted)
    return sizes


def test_across_a_slow_link_the_slots_go_round_in_turns(
    proxy: FaultProxy, redis_client: redis.Redis, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 21: through 20-40 ms each way the slots go round in TURNS turns (here of
    # two slots each), as many batches of outcomes (each with a claim behind it) on
    # the wire at once, so the jobs of one turn run while the others' round trips are
    # out, and no batch carries more than a turn's share (turns that end together
    # are written apart, so they stay apart). Claims count the outcomes written ahead
    # of them on the connection as free, and every claim in flight as held: never
    # more leases than the concurrency (sampled on Redis). Before: one batch in
    # flight at a time; then, with three turns, the last never started.
    from conveyor.worker.acks import TURNS

    concurrency = 2 * TURNS
    sizes = _count_batches(monkeypatch)
    writes = _count_writes_in_flight(monkeypatch)
    done, most, samples = _drain_through_latency(
        proxy, redis_client, queue_name, 40 * concurrency, concurrency
    )
    assert sorted(done) == list(range(40 * concurrency))
    assert samples > 100
    assert writes[0] >= TURNS, f"at most {writes[0]} batch(es) in flight at once, of {set(sizes)}"
    assert max(sizes) <= 2, f"batches of {sorted(set(sizes))} outcomes: a turn's share is 2"
    assert 1 <= most <= concurrency, f"{most} leases held at once with concurrency {concurrency}"


def test_on_loopback_the_slots_go_round_in_one_turn(
    redis_client: redis.Redis, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without a network the round trip is Redis's own work: halved turns would
    # cost script calls and overlap nothing, so one batch is in flight at a time.
    writes = _count_writes_in_flight(monkeypatch)
    url = f"redis://127.0.0.1:{redis_client.connection_pool.connection_kwargs['port']}/0"
    tasks = Tasks(queue_name, url=url)
    done: list[int] = []

    @tasks.task
    async def quick(n: int) -> None:
        done.append(n)

    with Queue(queue_name, url=url) as producer:
        producer.enqueue_many([("quick", n) for n in range(500)])
    runner = WorkerRunner(url)
    try:
        handle = runner.start(tasks, concurrency=10)
        wait_until(lambda: len(done) == 500, timeout=60)
    finally:
        runner.stop_all()
    assert handle.worker._slot_turns == 1
    assert writes[0] == 1


@pytest.mark.parametrize(("slow_pings", "turns"), [(5, 1), (99, 3)])
def test_the_round_trip_probe_ends_at_the_first_fast_ping(
    redis_client: redis.Redis,
    queue_name: str,
    monkeypatch: pytest.MonkeyPatch,
    slow_pings: int,
    turns: int,
) -> None:
    # A loaded host once answered five loopback PINGs in 0.5 ms or more each
    # (CI): a busy moment, not a network. The probe now stops at the first fast
    # answer, of up to ten; only ten slow ones make turns (three). The first
    # `slow_pings` PINGs of the worker's own wire wait 1 ms before going out.
    # Five slow ones made the old five-PING probe choose turns. An unslowed
    # PING may itself be slow on a loaded host, so the count after the slowed
    # ones is bounded, not exact.
    from conveyor.client.wire import AsyncWire
    from conveyor.worker.claiming import PROBES

    sent: list[float] = []
    own_call = AsyncWire.call

    async def slowed(self: AsyncWire, *args: object) -> object:
        if args == ("PING",):
            sent.append(time.monotonic())
            if len(sent) <= slow_pings:
                await asyncio.sleep(0.001)
        return await own_call(self, *args)

    monkeypatch.setattr(AsyncWire, "call", slowed)
    url = f"redis://127.0.0.1:{redis_client.connection_pool.connection_kwargs['port']}/0"
    tasks = Tasks(queue_name, url=url)

    @tasks.task
    async def quick(n: int) -> None:
        pass

    runner = WorkerRunner(url)
    try:
        handle = runner.start(tasks, concurrency=10)
        wait_until(lambda: len(sent) >= min(slow_pings + 1, PROBES), timeout=30)
        time.sleep(0.3)  # the probe's last PINGs, and any PING past its end
    finally:
        runner.stop_all()
    assert handle.worker._slot_turns == turns
    if turns == 1:
        assert slow_pings < len(sent) <= PROBES
    else:
        assert len(sent) == PROBES

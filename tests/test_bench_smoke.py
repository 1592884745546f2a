"""The benchmark harness on a tiny N, so it cannot rot (`make bench` runs the real thing).

Conveyor only, plus huey when the peers' venv (.venv-bench) is already there: the
test never installs anything. Every scenario runs once, on the harness's own
private redis-servers (the network ones through the harness's delay proxy), and
the records must have the documented shape.
"""

from __future__ import annotations

import json
import random
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conveyor.integrations.redis_server import RedisProcess

# bench/ lives at the repository root, next to tests/ (not an installed package)
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import host, mark  # noqa: E402
from bench.__main__ import main, parse  # noqa: E402
from bench.systems import (  # noqa: E402
    ENQUEUE_SINGLE,
    PARTIAL,
    RESULTS,
    SCENARIOS,
    applies,
    plan,
    with_stand_ins,
)
from bench.targets import best_peer_ratios  # noqa: E402
from bench.venv import ensure_peer_venv  # noqa: E402


def test_only_the_official_run_replaces_the_sites_chart(tmp_path: Path) -> None:
    from bench.report import publish_chart

    chart, site = tmp_path / "latest.png", tmp_path / "benchmarks.png"
    chart.write_bytes(b"new chart")
    site.write_bytes(b"old chart")
    assert not publish_chart(PARTIAL, chart, site=site)
    assert not publish_chart(tmp_path, chart, site=site)
    assert site.read_bytes() == b"old chart"
    assert publish_chart(RESULTS, chart, site=site)
    assert site.read_bytes() == b"new chart"


def test_only_a_full_run_at_the_default_sizes_writes_the_official_results() -> None:
    assert parse([]).out == str(RESULTS)
    assert parse(["--no-install", "--seed", "3", "--timeout", "60"]).out == str(RESULTS)
    partial = [
        ["--systems", "conveyor", "--scenarios", "ceiling", "--reps", "1"],
        ["--scenarios", "process_1proc"],
        ["--systems", "conveyor"],
        ["--quick"],
        ["--n", "20000"],
        ["--reps", "5"],
        ["--redis-server", "/opt/redis-8/redis-server"],
    ]
    for argv in partial:
        assert parse(argv).out == str(PARTIAL), argv
    assert parse(["--scenarios", "ceiling", "--out", "/tmp/c"]).out == "/tmp/c"


def _ceiling_run(hset: float, claim: float) -> dict[str, object]:
    return {"detail": {"commands": {"c50_P16": {"HSET": hset}},
                       "scripts": {"claim 100/call": {"jobs_per_s": claim}}}}  # fmt: skip


def test_a_run_judges_its_host_by_its_ceiling_against_the_quiet_hosts() -> None:
    quiet_hset, quiet_claim = host.QUIET_HOST["hset_pipelined"], host.QUIET_HOST["claim_100"]
    near = [_ceiling_run(quiet_hset * f, quiet_claim * f) for f in (0.9, 0.95, 1.3)]
    assert host.judge(near)["quiet"] is True  # type: ignore[index]
    faster = host.judge([_ceiling_run(quiet_hset * 2, quiet_claim * 1.5)])
    assert faster is not None and faster["quiet"] is True
    # this host of 2026-12-01: Redis's commands and scripts at about 40% of the quiet host's
    slow = host.judge([_ceiling_run(431_034, 61_728)])
    assert slow is not None and slow["quiet"] is False
    assert round(slow["share_of_quiet"]["claim_100"], 2) == 0.41
    assert "**not a quiet host**" in host.sentence(slow)
    # one figure off is enough: fast commands with slow scripts
    mixed = host.judge([_ceiling_run(quiet_hset, quiet_claim * 0.8)])
    assert mixed is not None and mixed["quiet"] is False
    # medians of the reps, not the best one
    reps = [_ceiling_run(quiet_hset, c * quiet_claim) for c in (0.5, 0.6, 1.2)]
    assert host.judge(reps)["quiet"] is False  # type: ignore[index]
    assert host.judge([{"error": "redis-benchmark failed"}]) is None
    assert host.sentence(None).startswith("Host: not judged")


FIELDS = {"system", "scenario", "jobs_per_s", "p50_ms", "p99_ms", "bytes_per_job", "runs"}


@pytest.mark.timeout(150)
def test_bench_runs_on_a_tiny_n(tmp_path: Path, redis_binary: str) -> None:
    if shutil.which("redis-benchmark") is None:
        pytest.fail("redis-benchmark is not on PATH (it comes with redis-server)")
    systems = ["conveyor"]
    if ensure_peer_venv(install=False) is None:
        systems.append("huey")
    out = tmp_path / "results"
    argv = [
        "--n", "200", "--bulk-n", "500", "--lat-n", "40", "--rate", "400", "--net-n", "100",
        "--ceiling-n", "2000", "--reps", "1", "--enqueue-reps", "2", "--timeout", "30",
        "--no-install",
        "--systems", ",".join(systems), "--out", str(out), "--redis-server", redis_binary,
    ]  # fmt: skip
    assert main(argv) == 0

    doc = json.loads((out / "latest.json").read_text())
    records = {(r["system"], r["scenario"]): r for r in doc["records"]}
    for rec in doc["records"]:
        assert set(rec) >= FIELDS, rec
        assert "error" not in rec, rec["error"]
    for scenario in SCENARIOS:
        system = "redis" if scenario == "ceiling" else "conveyor"
        assert (system, scenario) in records, scenario
        reps = 2 if scenario in ENQUEUE_SINGLE else 1
        assert len(records[(system, scenario)]["runs"]) == reps, scenario

    def positive(system: str, scenario: str, key: str) -> None:
        value = records[(system, scenario)][key]
        assert isinstance(value, float | int) and value > 0, (system, scenario, key, value)

    for scenario in ("enqueue_single", "enqueue_single_async", "enqueue_single_uvloop",
                     "enqueue_bulk", "process_1proc", "process_2proc", "process_1proc_c100",
                     "process_2proc_c100", "enqueue_single_net", "process_1proc_net",
                     "process_1proc_net_c100"):  # fmt: skip
        positive("conveyor", scenario, "jobs_per_s")
    for scenario in ("enqueue_single", "enqueue_bulk", "process_1proc", "process_1proc_c100"):
        positive("conveyor", scenario, "redis_cpu_us_per_job")
        positive("conveyor", scenario, "redis_commands_per_job")
    for scenario in ("process_1proc", "process_1proc_c100"):
        run = records[("conveyor", scenario)]["runs"][0]
        assert 0 <= run["redis_sys_cpu_us_per_job"] <= run["redis_cpu_us_per_job"], run
        # the workers' CPU is sampled inside the window only (not from before they started)
        sampled = run["redis_window"] != "whole run"
        assert ("worker_cpu_us_per_job" in run) == sampled, run
    for scenario in ("process_2proc", "process_2proc_c100"):  # both start at the gate
        run = records[("conveyor", scenario)]["runs"][0]
        assert run["gate_processes_ready"] == 2, run
        assert run["worker_processes_that_ran_jobs"] == 2, run
    defaults = records[("conveyor", "process_1proc")]["runs"][0]
    assert defaults["concurrency"] == "default"
    assert records[("conveyor", "process_1proc_c100")]["runs"][0]["concurrency"] == "100"
    # 1 ms each way: a job cannot start sooner than its enqueue's and its wake-up's trips
    trips = doc["meta"]["ping_round_trip_ms"]
    assert trips["through_the_proxy"] >= 2.0 > trips["direct"], trips
    assert records[("conveyor", "latency_net")]["p50_ms"] >= 2.0
    positive("conveyor", "latency", "p50_ms")
    positive("conveyor", "latency", "p99_ms")
    positive("conveyor", "latency", "complete_p50_ms")
    positive("conveyor", "redis_memory", "bytes_per_job")
    positive("redis", "ceiling", "jobs_per_s")
    verdict = doc["meta"]["host"]  # the run judged its own host from its ceiling
    assert verdict["measured"]["claim_100"] > 0 and verdict["measured"]["hset_pipelined"] > 0
    assert host.sentence(verdict) in (out / "latest.md").read_text()
    assert records[("conveyor", "latency")]["jobs_per_s"] is None  # does not apply
    if "huey" in systems:
        positive("huey", "process_1proc", "jobs_per_s")
        positive("huey", "enqueue_single", "redis_cpu_us_per_job")
        assert "not applicable" in records[("huey", "process_1proc_c100")]["note"]
        assert records[("huey", "enqueue_bulk")]["jobs_per_s"] is None  # no bulk API
        assert "not applicable" in records[("huey", "enqueue_bulk")]["note"]
    assert {t["target"] for t in doc["targets"]} >= {
        "process_1proc", "process_1proc_c100", "process_1proc_net", "latency_net p50 (enqueue "
        "to start)", "Redis CPU per processed job (process_1proc_c100)", "enqueue_bulk",
    }  # fmt: skip
    assert (out / "latest.md").read_text().startswith("# Benchmark results")
    assert (out / "latest.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_a_job_waits_at_the_start_gate_until_the_harness_opens_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mark, "GATE", str(tmp_path))
    monkeypatch.setattr(mark, "_gate_open", False)
    monkeypatch.setattr(mark, "_pending", mark.collections.deque())
    monkeypatch.setattr(mark, "_owner_pid", -1)  # no flusher thread: nothing to flush to
    monkeypatch.setattr(mark, "_start", lambda: None)
    passed = threading.Event()
    job = threading.Thread(target=lambda: (mark.mark(), passed.set()), daemon=True)
    job.start()
    ready = tmp_path / f"ready-{mark.os.getpid()}"
    deadline = time.monotonic() + 5
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.001)
    assert ready.exists()
    time.sleep(0.05)
    assert not passed.is_set() and not mark._pending  # held at the gate, not yet started
    (tmp_path / "go").touch()
    assert passed.wait(5)
    assert len(mark._pending) == 1
    mark.mark()  # the gate is open for the process's later jobs
    assert len(mark._pending) == 2


def test_the_single_enqueue_scenarios_run_as_one_shuffled_block_with_their_own_reps() -> None:
    systems = ["conveyor", "huey", "saq"]
    scenarios = ["enqueue_single", "enqueue_single_async", "enqueue_bulk", "ceiling"]
    runs = plan(systems, scenarios, 2, 5, random.Random(7))
    count: dict[tuple[str, str], int] = {}
    for _, scenario, system in runs:
        count[(scenario, system)] = count.get((scenario, system), 0) + 1
    assert count == {
        ("enqueue_single", "conveyor"): 5,
        ("enqueue_single", "huey"): 5,
        ("enqueue_single", "saq"): 5,
        ("enqueue_single_async", "conveyor"): 5,
        ("enqueue_bulk", "conveyor"): 2,
        ("ceiling", "redis"): 2,
    }  # fmt: skip  (huey has no bulk API; saq's API is async only)
    for rep in range(5):
        of_rep = [(sc, sy) for r, sc, sy in runs if r == rep]
        block = [i for i, (sc, _) in enumerate(of_rep) if sc in ENQUEUE_SINGLE]
        assert block == list(range(4)), of_rep  # first, and together
    orders = {
        tuple(sy for r, sc, sy in runs if r == rep and sc in ENQUEUE_SINGLE) for rep in range(5)
    }
    assert len(orders) > 1  # shuffled afresh each rep


@pytest.mark.timeout(90)
def test_the_flows_bench_runs_on_a_tiny_n(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench.flows import main as flows_main

    monkeypatch.setattr(sys, "argv", ["flows", "--children", "60", "--chains", "15"])
    flows_main()
    out = capsys.readouterr().out
    for what in ("plain jobs", "fan-out of 60 + fan-in", "15 chains of 4 steps"):
        assert f"conveyor  {what}" in out
    assert "a plain job's Redis time" in out


def test_asking_for_an_equal_concurrency_scenario_also_runs_what_stands_in_for_a_thread_pool_peer(
) -> None:  # fmt: skip
    # without process_2proc, huey would drop out of process_2proc_c100's ratio unseen
    assert with_stand_ins(["conveyor", "huey@redis5", "taskiq"], ["process_2proc_c100"]) == [
        "process_2proc", "process_2proc_c100"]  # fmt: skip
    assert with_stand_ins(["conveyor", "huey"], ["process_1proc_net_c100", "latency"]) == [
        "process_1proc_net", "process_1proc_net_c100", "latency"]  # fmt: skip
    # asked for already, or no thread-pool peer: nothing added
    both = ["process_1proc", "process_1proc_c100"]
    assert with_stand_ins(["conveyor", "huey"], both) == both
    assert with_stand_ins(["conveyor", "taskiq", "saq"], ["process_2proc_c100"]) == [
        "process_2proc_c100"]  # fmt: skip
    assert with_stand_ins(["conveyor", "huey"], ["enqueue_single"]) == ["enqueue_single"]


def test_a_thread_pool_peer_counts_with_its_defaults_in_the_equal_concurrency_ratio() -> None:
    assert applies("huey", "process_1proc_c100") is not None
    assert applies("taskiq@0.12", "process_1proc_c100") is None
    runs = {
        ("conveyor", "process_1proc_c100"): [{"rep": 0, "jobs_per_s": 1000.0},
                                             {"rep": 1, "jobs_per_s": 900.0}],
        ("huey", "process_1proc"): [{"rep": 0, "jobs_per_s": 400.0},
                                    {"rep": 1, "jobs_per_s": 100.0}],
        ("taskiq@0.12", "process_1proc_c100"): [{"rep": 0, "jobs_per_s": 300.0},
                                                {"rep": 1, "jobs_per_s": 300.0}],
        ("taskiq@0.12", "process_1proc"): [{"rep": 0, "jobs_per_s": 900.0}],  # not its c100
    }  # fmt: skip
    ratio, per_rep, fastest = best_peer_ratios(
        runs, "process_1proc_c100", "process_1proc_c100", ["huey", "taskiq@0.12"]
    )
    assert per_rep == [2.5, 3.0]
    assert fastest == ["huey", "taskiq@0.12"]
    assert ratio == 2.75


def _reply_delays(port: int, pings: int, every: float) -> list[float]:
    """Send PINGs `every` seconds apart on one connection; each one's reply time."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(10)
    arrived: list[float] = []

    def read() -> None:
        got = b""
        while len(arrived) < pings:
            chunk = sock.recv(4096)
            now = time.monotonic()
            got += chunk
            arrived.extend([now] * (got.count(b"+PONG\r\n") - len(arrived)))

    reader = threading.Thread(target=read)
    reader.start()
    sent = []
    for _ in range(pings):
        sent.append(time.monotonic())
        sock.sendall(b"PING\r\n")
        time.sleep(every)
    reader.join(20)
    sock.close()
    return sorted(a - s for a, s in zip(arrived, sent, strict=True))


def _delays_through_proxy(
    redis_server: RedisProcess, delay: float, every: float
) -> tuple[list[float], float]:
    """40 PINGs `every` s apart through a DelayProxy of `delay`: each reply's delay,
    and the timer overshoot the proxy measured."""
    from bench.netproxy import DelayProxy

    assert redis_server.port is not None
    proxy = DelayProxy(redis_server.port, delay).start()
    try:
        return _reply_delays(proxy.port, 40, every), proxy.early
    finally:
        proxy.stop()


def test_the_network_proxy_delays_close_chunks_by_the_delay_alone(
    redis_server: RedisProcess,
) -> None:
    """Chunks 0.3 ms apart each leave `delay` after they came in: on asyncio's default epoll
    loop, whose timeouts are whole milliseconds rounded up, the second of two close chunks
    waited a whole millisecond more (median excess 1.2-1.3 ms for the two hops against
    0.15-0.2 ms with the select loop, 2026-11-25, load average 3). That rounding adds its
    millisecond in every try; a busy host's scheduling only in some (one try of a `make test`
    on a slow host: median excess 3.9 ms; the same test alone there 0.19-0.25 ms), so the best of
    three tries is judged."""
    medians = []
    for _ in range(3):
        delays, _ = _delays_through_proxy(redis_server, 0.020, 0.0003)
        medians.append(delays[len(delays) // 2])
        if medians[-1] - 0.040 < 0.0007:
            return
    pytest.fail(f"median delay per try, s (0.040 is the delay): {medians}")


def test_the_network_proxy_delays_every_chunk_by_the_delay_and_no_more(
    redis_server: RedisProcess,
) -> None:
    """A delay line: each PING's reply comes back 2 x 100 ms after it left. A proxy that
    sleeps before forwarding each chunk it reads (chaos/proxy.py's latency fault) makes a
    chunk that arrives during that sleep wait for it to end first: longer on the median
    (medians 252 ms against 203 here, 2026-11-25)."""
    delays, early = _delays_through_proxy(redis_server, 0.100, 0.010)
    median = delays[len(delays) // 2]
    # a chunk may leave up to the timer overshoot the proxy measured (< 1 ms) before due
    assert delays[0] >= 0.200 - 2 * early, delays
    assert early < 0.001, early
    assert median < 0.230, delays


@pytest.mark.timeout(90)
def test_the_driver_runs_the_after_fill_command_between_the_backlog_and_the_workers(
    tmp_path: Path, redis_binary: str
) -> None:
    """bench/run_ir.py switches callgrind on with it: the backlog must be in Redis when the
    command runs, and no job taken yet."""
    seen = tmp_path / "seen"
    with (
        RedisProcess(binary=redis_binary, data_dir=tmp_path / "q", appendonly=False) as queue,
        RedisProcess(binary=redis_binary, data_dir=tmp_path / "m", appendonly=False) as marks,
    ):
        server = queue.url.rsplit("/", 1)[0]
        command = (
            f"sh -c 'redis-cli -u {server} zcard conveyor:{{bench}}:ready > {seen}; "
            f"redis-cli -u {server} zcard conveyor:{{bench}}:active >> {seen}'"
        )
        done = subprocess.run(
            [sys.executable, "-m", "bench.driver", "--system", "conveyor",
             "--module", "bench.conveyor_adapter", "--scenario", "process_1proc", "--n", "300",
             "--queue-url", queue.url, "--mark-url", marks.url, "--logdir", str(tmp_path),
             "--timeout", "60", "--after-fill", command],
            cwd=ROOT, capture_output=True, text=True, check=True, timeout=80,
        )  # fmt: skip
    result = json.loads(done.stdout.rsplit("BENCH-RESULT ", 1)[1])
    assert "error" not in result, result
    assert result["jobs_per_s"] > 0
    assert seen.read_text().split() == ["300", "0"]  # all waiting, none leased yet

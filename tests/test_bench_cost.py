"""bench/cost.py: the worker processes' CPU the benchmark charges per job."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.cost import TICK, cost_per_job, sessions_cpu  # noqa: E402

# A session leader that forks a child burning CPU, waits for it (so the child's time
# lands in the leader's cutime), then burns more itself and stays alive.
BURNER = """
import os, time, sys
def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
pid = os.fork()
if pid == 0:
    burn(0.4)
    os._exit(0)
os.waitpid(pid, 0)
burn(0.3)
print("done", flush=True)
time.sleep(60)
"""


def _burner() -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", BURNER], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "done"
    return proc


def test_a_session_is_charged_for_its_leader_and_the_children_it_reaped() -> None:
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            start_new_session=True)  # fmt: skip
    busy = _burner()
    try:
        spent = sessions_cpu({busy.pid})
        assert 0.65 <= spent < 2.0, spent  # 0.4 s in the child + 0.3 s in the leader
        assert sessions_cpu({idle.pid}) < 0.2  # only an interpreter's start
        both = sessions_cpu({busy.pid, idle.pid})
        assert both >= spent
        assert sessions_cpu({2**22 + 7}) == 0.0  # no such session
    finally:
        for proc in (busy, idle):
            proc.kill()
            proc.wait()
        assert busy.stdout is not None
        busy.stdout.close()


def test_the_workers_cpu_is_charged_per_job_only_when_both_snapshots_have_it() -> None:
    before = {"cpu": 1.0, "cpu_sys": 0.25, "calls": {"evalsha": 10}, "workers_cpu": 2.0}
    after = {"cpu": 1.5, "cpu_sys": 0.3, "calls": {"evalsha": 30, "hset": 400},
             "workers_cpu": 2.8}  # fmt: skip
    cost = cost_per_job(before, after, 200)
    assert cost["redis_cpu_us_per_job"] == 2500.0
    assert cost["redis_sys_cpu_us_per_job"] == 250.0
    assert cost["worker_cpu_us_per_job"] == 4000.0
    assert cost["scripts_per_job"] == 0.1
    del before["workers_cpu"]
    assert "worker_cpu_us_per_job" not in cost_per_job(before, after, 200)


def test_a_process_that_ends_while_proc_is_read_is_skipped(tmp_path: Path) -> None:
    # a /proc-like tree: one entry vanished after the listing, one of another session
    (tmp_path / "100").mkdir()
    (tmp_path / "100" / "stat").write_text(
        "100 (worker (pool) x) S 1 100 100 0 -1 0 0 0 0 0 150 50 20 5 20 0\n"
    )
    (tmp_path / "101").mkdir()  # no stat: the process ended
    (tmp_path / "102").mkdir()
    (tmp_path / "102" / "stat").write_text(
        "102 (other) S 1 102 102 0 -1 0 0 0 0 0 999 999 0 0 20 0\n"
    )
    (tmp_path / "self").mkdir()
    ticks = 150 + 50 + 20 + 5
    assert abs(sessions_cpu({100}, tmp_path) - ticks * TICK) < 1e-9

"""37: the truth test (tests/test_truth.py) at full size: the same mix and the same
checks (chaos/truth.py), `scale` times as many jobs and flows."""

from __future__ import annotations

from chaos.checker import Result
from chaos.harness import Scene
from chaos.scenarios import scenario
from chaos.truth import run_truth


@scenario(
    37,
    "operator-truth",
    "A realistic mix with a killed worker, a paused queue and group: every number the "
    "client, the CLI's --json, the dashboard and /metrics show matches the ledger",
    full=dict(scale=20),
    bounded=dict(scale=1),
)
def operator_truth(scene: Scene, *, scale: int) -> Result:
    r = Result("operator-truth")
    url = scene.server().url
    run_truth(url, "truth", scene.dir, r.check, scale=scale)
    r.jobs = (30 + 5 + 3 + 3) * scale + 1 + 6  # the mix, the slow job, the 6 left waiting
    r.kills = 1
    return r

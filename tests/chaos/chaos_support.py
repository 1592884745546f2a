"""Helpers of the chaos tests: the per-session scenario runner and the verdict."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from chaos.checker import Result  # noqa: E402
from chaos.scenarios import run_scenario  # noqa: E402


class Runs:
    """Scenario results of this session, each scenario run at most once."""

    def __init__(self, base: Path, binary: str, full: bool) -> None:
        self.base = base
        self.binary = binary
        self.full = full
        self._done: dict[str, Result] = {}

    def __call__(self, name: str) -> Result:
        if name not in self._done:
            self._done[name] = run_scenario(
                name, base_dir=self.base, bounded=not self.full, binary=self.binary
            )
        return self._done[name]


def verdict(result: Result, *, only: Iterable[str] = (), exclude: Iterable[str] = ()) -> None:
    """Assert that the result's checks (those whose text contains one of `only`, minus those
    containing one of `exclude`) all passed; the failure message is the scenario's report."""
    only, exclude = tuple(only), tuple(exclude)
    checks = [
        c for c in result.checks
        if (not only or any(s in c.what for s in only)) and not any(s in c.what for s in exclude)
    ]  # fmt: skip
    assert checks, f"no check of {result.name} matches {only or '(all)'}:\n{result.report()}"
    bad = [c for c in checks if not c.ok]
    assert not bad, "\n".join(
        [f"{result.name}: {len(bad)} check(s) failed:"]
        + [f"  {c.what}: {c.detail[:1500]}" for c in bad]
        + ["", result.report()[:6000]]
    )

"""The scenarios of the reliability issue, each one function `run(scene, **params) -> Result`,
registered with its full-size parameters (`python -m chaos`) and its bounded ones (the tests).
"""

from __future__ import annotations

import importlib
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.checker import Result
from chaos.harness import Scene

Runner = Callable[..., Result]


@dataclass(frozen=True)
class Scenario:
    number: int
    name: str
    title: str
    run: Runner
    full: dict[str, Any] = field(default_factory=dict)
    bounded: dict[str, Any] = field(default_factory=dict)


REGISTRY: dict[str, Scenario] = {}
MODULES = (
    "workers",
    "poison",
    "state",
    "hostile",
    "server",
    "aof",
    "network",
    "security",
    "cluster",
    "flows",
    "flow_endings",
    "soak",
    "execution",
    "mixed_faults",
    "memory",
    "semantics",
    "sentinel",
    "suspects",
    "truth",
)


def scenario(
    number: int, name: str, title: str, *, full: dict[str, Any], bounded: dict[str, Any]
) -> Callable[[Runner], Runner]:
    def register(fn: Runner) -> Runner:
        REGISTRY[name] = Scenario(number, name, title, fn, full, bounded)
        return fn

    return register


def load_all() -> dict[str, Scenario]:
    for module in MODULES:
        importlib.import_module(f"chaos.scenarios.{module}")
    return dict(sorted(REGISTRY.items(), key=lambda kv: kv[1].number))


def find(key: str | int) -> Scenario:
    found = load_all()
    for sc in found.values():
        if key in (sc.name, sc.number, str(sc.number)):
            return sc
    raise KeyError(f"no scenario {key!r}; known: {[s.name for s in found.values()]}")


def run_scenario(
    key: str | int,
    *,
    base_dir: Path,
    bounded: bool,
    binary: str | None = None,
    seed: int | None = None,
    **overrides: Any,
) -> Result:
    """Run one scenario in a fresh Scene under `base_dir`; never raises (a crash of the
    scenario itself is a failed check with the traceback)."""
    sc = find(key)
    params = {**(sc.bounded if bounded else sc.full), **overrides}
    started = time.monotonic()
    scene = Scene(base_dir / f"s{sc.number:02d}-{sc.name}", binary=binary, seed=seed)
    try:
        result = sc.run(scene, **params)
    except Exception:
        result = Result(sc.name)
        result.check("scenario ran to its end", False, traceback.format_exc()[-3000:])
    finally:
        scene.close()
    result.name = sc.name
    result.seconds = time.monotonic() - started
    result.scale = "bounded" if bounded else "full"
    result.seed = scene.seed
    (scene.dir / "logs.txt").write_text(scene.logs())
    return result

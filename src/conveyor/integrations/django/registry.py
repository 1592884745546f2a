"""The tasks of a django.tasks backend, found where Django keeps them: the `tasks` module of
every installed app, and the modules a backend's OPTIONS['MODULES'] names."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from types import ModuleType
from typing import Any

from django.apps import apps

from conveyor.integrations.django._compat import Task


def discover_tasks(alias: str, modules: Iterable[str] = ()) -> dict[str, Task[..., Any]]:
    """The module-level tasks of backend `alias`, by module path."""
    found: dict[str, Task[..., Any]] = {}
    for module in [*_app_task_modules(), *(importlib.import_module(m) for m in modules)]:
        for value in vars(module).values():
            if isinstance(value, Task) and value.backend == alias:
                found.setdefault(value.module_path, value)
    return found


def _app_task_modules() -> list[ModuleType]:
    found = []
    for app in apps.get_app_configs():
        name = f"{app.name}.tasks"
        try:
            found.append(importlib.import_module(name))
        except ModuleNotFoundError as exc:
            if exc.name != name:  # the module exists but imports something missing
                raise
    return found

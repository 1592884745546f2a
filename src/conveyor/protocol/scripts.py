"""Lua scripts shipped as package data, with their includes expanded.

A script line `-- @include <name>` is replaced by `lua/include/<name>.lua`:
static text composed once at load, never Lua built from runtime values.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

SCRIPT_NAMES = (
    "enqueue",
    "enqueue_new",
    "enqueue_skip",
    "claim",
    "heartbeat",
    "progress",
    "policy",
    "complete",
    "fail",
    "reap",
    "release",
    "await",
    "cancel",
    "abort",
    "limits",
    "schedule",
    "schedule_next",
    "unschedule",
    "promote",
    "reprioritize",
    "retry",
    "remove",
    "rate_limited",
    "checkpoint",
    "defer",
    "record_metrics",
    "job_log",
    "flow_add",
    "flow_settle",
    "flow_attach",
    "flow_wait",
    "forget",
    "suspect",
    "migrate",
)

_INCLUDE = "-- @include "


@dataclass(frozen=True, slots=True)
class Script:
    """One transition's Lua source and the SHA1 that EVALSHA runs it by."""

    name: str
    source: str
    sha: str


def _read(relative: str) -> str:
    return (resources.files("conveyor.protocol") / "lua" / relative).read_text("utf-8")


def expand(text: str, read_include: Callable[[str], str]) -> str:
    """Protocol §7: split at LF, replace each include line by the include's
    whole text, join with LF, add a final LF. (Not str.splitlines: it also
    splits at CR, VT, FF and Unicode separators, which §7 does not.)"""
    lines = []
    for line in text.removesuffix("\n").split("\n"):
        if line.startswith(_INCLUDE):
            lines.append(read_include(line[len(_INCLUDE) :].strip()))
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"


def load_script(name: str) -> Script:
    """The script for one transition, includes expanded."""
    if name not in SCRIPT_NAMES:
        raise KeyError(f"no Lua script named {name!r}")
    source = expand(_read(f"{name}.lua"), lambda include: _read(f"include/{include}.lua"))
    return Script(name, source, hashlib.sha1(source.encode("utf-8")).hexdigest())

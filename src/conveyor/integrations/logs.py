"""Logging set-up for the command line: a level, and text or JSON lines.

JSON lines carry `time`, `level`, `logger`, `message`, the job's `job_id`,
`task`, `queue` and `attempt` when the record is about a job or was logged
by its handler (conveyor.worker.job_lines), and `exception` (the traceback)
when there is one. The formatter is the standard library's with a
`format()` of a dozen lines: no dependency for that.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from conveyor.worker.job_lines import JOB_FIELDS, JobFields

LEVELS = ("debug", "info", "warning", "error", "critical")
FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in JOB_FIELDS:
            if hasattr(record, name):
                entry[name] = getattr(record, name)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure(level: str, fmt: str) -> None:
    """Send log records at `level` and above to stderr as `fmt` lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(JobFields())
    formatter = JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT)
    handler.setFormatter(formatter)
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


# Options of the `conveyor` group that may also be written after a subcommand.
_FLAG = "--verbose"
_VALUED = ("--log-level", "--log-format")


def hoist_logging_options(args: list[str]) -> list[str]:
    """`conveyor worker app:tasks -v` means `conveyor -v worker app:tasks`:
    move the group's logging options found after the subcommand to the front
    (up to a `--`)."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest.extend(args[i:])
            break
        if arg == _FLAG or (arg.startswith("-v") and set(arg[1:]) == {"v"}):
            front.append(arg)
        elif arg in _VALUED and i + 1 < len(args):
            front.extend(args[i : i + 2])
            i += 1
        elif arg.startswith(tuple(f"{name}=" for name in _VALUED)):
            front.append(arg)
        else:
            rest.append(arg)
        i += 1
    return front + rest

"""Options and helpers every `conveyor` command shares: where Redis is (the
embedded default when no URL is given), JSON or tables, dates."""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

from conveyor.client.connection import URL_VARIABLES
from conveyor.client.models import QueueSettings
from conveyor.client.sync import Queue
from conveyor.integrations.cli_audit import audited
from conveyor.integrations.embedded import EmbeddedRedis

F = TypeVar("F", bound=Callable[..., Any])

url_option = click.option(
    "--url", envvar=list(URL_VARIABLES), help="Redis URL (default: the embedded server)."
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
prefix_option = click.option(
    "--prefix", default="conveyor", show_default=True, help="The queues' key prefix."
)


def queue_options(command: F) -> F:
    """--url, --prefix and --json."""
    return url_option(prefix_option(json_option(command)))


@contextmanager
def resolved_url(url: str | None) -> Iterator[str]:
    """`url`, else the embedded server's (started or reused, kept while in use)."""
    if url:
        yield url
        return
    with EmbeddedRedis() as embedded:
        click.echo(f"using the embedded Redis at {embedded.url}", err=True)
        yield embedded.url


def redis_url(url: str | None, stack: ExitStack) -> str:
    """The given URL, else the embedded server: reused, or started and left
    running (`conveyor redis` owns its lifetime, not a worker)."""
    if url:
        return url
    embedded = stack.enter_context(EmbeddedRedis(keep_running=True))
    if embedded.owned:
        click.echo(
            f"started the embedded Redis at {embedded.url}; it keeps running for other "
            "workers and producers (`conveyor redis --stop` stops it)",
            err=True,
        )
    else:
        click.echo(f"using the embedded Redis at {embedded.url}", err=True)
    return embedded.url


@contextmanager
def open_queue(name: str, url: str | None, prefix: str = "conveyor") -> Iterator[Queue]:
    """The queue `name` (`<queue>:failures`: its failure lane) at `url`, else
    on the embedded server; a command that
    changes something is recorded in its audit trail (cli_audit)."""
    settings = QueueSettings(prefix=prefix, eviction_check="ignore")
    lane = name.endswith(":failures")
    with (
        resolved_url(url) as found,
        Queue(name.removesuffix(":failures"), url=found, settings=settings, failures=lane) as queue,
        audited(queue),
    ):
        yield queue


@contextmanager
def open_kept(name: str, url: str | None, prefix: str = "conveyor") -> Iterator[Queue]:
    """The queue `name` at `url`, else on the embedded server, which keeps running
    after the command (redis_url)."""
    with ExitStack() as stack:
        settings = QueueSettings(prefix=prefix)
        with Queue(name, url=redis_url(url, stack), settings=settings) as queue:
            yield queue


def when(value: datetime | float | None) -> str:
    """A date for people: `2026-11-25 13:02:07 UTC`, never an epoch float."""
    if value is None or value == "":
        return "-"
    if not isinstance(value, datetime):
        value = datetime.fromtimestamp(float(value), UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Plain aligned columns; numbers right-aligned."""
    cells = [[str(c) for c in headers], *[["-" if c is None else str(c) for c in r] for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [all(isinstance(r[i], int) for r in rows) and bool(rows) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [
            cell.rjust(w) if num else cell.ljust(w)
            for cell, w, num in zip(row, widths, numeric, strict=True)
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def emit(as_json: bool, payload: Any, text: Callable[[], str]) -> None:
    """`payload` as JSON with --json, else the human text."""
    click.echo(json.dumps(payload, indent=2, default=json_value) if as_json else text())


def json_value(value: Any) -> Any:
    """What JSON cannot hold as such: dates as ISO 8601 in UTC, enums by value."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    return str(value)


def shown(value: Any) -> str:
    """A value in a table or a text line: JSON for data (never a Python repr)."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, datetime):
        return when(value)
    return json.dumps(value, default=json_value, ensure_ascii=False, sort_keys=True)

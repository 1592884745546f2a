"""`conveyor worker`: load the tasks, pick the queues and the concurrency, run a
worker (and its Prometheus endpoint). cli.py registers the command."""

from __future__ import annotations

import importlib
import keyword
import logging
import os
import re
import signal
import sys
import traceback
from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, NoReturn

import click

import conveyor
from conveyor.client.sync import Queue
from conveyor.client.tasks import Tasks
from conveyor.errors import ConfigurationError, ConnectionLostError
from conveyor.integrations.cli_options import redis_url, url_option
from conveyor.worker.queues import parse_queue_spec
from conveyor.worker.runtime import Worker, WorkerSettings

if TYPE_CHECKING:
    from conveyor.integrations.prometheus import PrometheusHook


def load_tasks(target: str) -> Tasks:
    """Import `module:attribute` (from the current directory too)."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise click.BadParameter("expected module:attribute, e.g. app:tasks")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if not _is_missing(exc, module_name):
            _module_failed(module_name, exc)
        raise click.BadParameter(
            f"no module {module_name!r} (looked in {os.getcwd()} and on sys.path)"
        ) from exc
    except Exception as exc:  # raised by the user's module as it ran
        _module_failed(module_name, exc)
    try:
        found: Any = getattr(module, attribute)
    except AttributeError as exc:
        raise click.BadParameter(f"module {module_name!r} has no {attribute!r}") from exc
    if not isinstance(found, Tasks):
        raise click.BadParameter(f"{target} is a {type(found).__name__}, not conveyor Tasks")
    return found


def _module_failed(module_name: str, exc: Exception) -> NoReturn:
    """Importing the user's module failed inside it: one line naming the module, then
    the user's frames only (not click's, importlib's nor ours), and exit 2."""
    lines = [f"error: importing module {module_name!r} failed: {type(exc).__name__}: {exc}\n"]
    frames = traceback.extract_tb(exc.__traceback__)
    lines += traceback.format_list([f for f in frames if not _not_users(f.filename)])
    if isinstance(exc, SyntaxError):  # the file, line and caret are in the error itself
        lines += traceback.format_exception_only(exc)[:-1]
    click.echo("".join(lines).rstrip("\n"), err=True)
    sys.exit(2)


def _not_users(filename: str) -> bool:
    return filename.startswith("<frozen") or any(
        filename.startswith(root) for root in _LIBRARY_ROOTS
    )


_LIBRARY_ROOTS = tuple(
    os.path.dirname(m.__file__ or "") + os.sep for m in (click, importlib, conveyor)
)


def parse_queues(spec: str) -> tuple[list[str], tuple[int, ...]]:
    """`high,default,low` (strict order) or `high:5,default:3,low:1` (weights):
    the queue names and their weights (none for strict order)."""
    try:
        return parse_queue_spec(spec)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint="--queues") from exc


def tasks_of_queues(target: str, tasks: Tasks, names: list[str]) -> list[Tasks]:
    """The Tasks of each named queue: TARGET's own, or another Tasks object
    of TARGET's module (a task runs only on the queue it is registered on)."""
    module = sys.modules[target.partition(":")[0]]
    found: dict[str, Tasks] = {}
    for value in [tasks, *vars(module).values()]:
        if isinstance(value, Tasks):
            found.setdefault(value.queue_name, value)
    missing = [n for n in names if n not in found]
    if missing:
        variable = _fresh_name(missing[0], vars(module))
        raise click.BadParameter(
            f"no Tasks for queue(s) {missing} in module {module.__name__!r} (it has Tasks for "
            f"{sorted(found)}): define e.g. `{variable} = Tasks({missing[0]!r})` there",
            param_hint="--queues",
        )
    if tasks.queue_name not in names:
        click.echo(
            f"warning: {target} is the Tasks of queue {tasks.queue_name!r}, which --queues does "
            f"not name: this worker does not serve {tasks.queue_name!r} (TARGET only locates "
            f"the module; add it to --queues to serve it)",
            err=True,
        )
    return [found[n] for n in names]


def _fresh_name(queue: str, taken: dict[str, Any]) -> str:
    """A variable name for the Tasks of `queue` that the module does not use yet."""
    stem = re.sub(r"\W", "_", queue).strip("_").lower() or "queue"
    if stem[0].isdigit():
        stem = f"q{stem}"
    name, number = f"{stem}_tasks", 2
    while name in taken or keyword.iskeyword(name):
        name, number = f"{stem}_tasks{number}", number + 1
    return name


def _is_missing(exc: ImportError, module_name: str) -> bool:
    """True when the module named on the command line (or a package above
    it) does not exist, not when something it imports fails."""
    parts = module_name.split(".")
    return exc.name in {".".join(parts[:i]) for i in range(1, len(parts) + 1)}


class Concurrency(click.ParamType):  # type: ignore[type-arg]  # generic in click 8.2+ only
    name = "N|auto"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value == "auto" or isinstance(value, int):
            return value
        try:
            number = int(value)
        except ValueError:
            self.fail(f"{value!r} is neither a number nor 'auto'", param, ctx)
        if number < 1:
            self.fail(f"{value!r} is not at least 1", param, ctx)
        return number


CONCURRENCY = Concurrency()


def execution_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The worker's process execution options (README, "Execution")."""
    options = [
        click.option(
            "--min",
            "min_concurrency",
            type=click.IntRange(min=1),
            default=1,
            help="With --concurrency auto: the fewest jobs at once.",
        ),
        click.option(
            "--max",
            "max_concurrency",
            type=click.IntRange(min=1),
            help="With --concurrency auto: the most [4 per CPU].",
        ),
        click.option(
            "--executor",
            type=click.Choice(["thread", "process"]),
            default="thread",
            show_default=True,
            help="Where sync handlers without an executor of their own run.",
        ),
        click.option("--processes", type=click.IntRange(min=1), help="Child processes [CPUs]."),
        click.option(
            "--max-tasks-per-child",
            type=click.IntRange(min=1),
            help="Recycle a child after N jobs.",
        ),
        click.option(
            "--max-memory-per-child",
            type=click.IntRange(min=1),
            help="MiB: recycle a child after a job took its peak RSS past it.",
        ),
        click.option(
            "--suspects",
            type=click.IntRange(min=1),
            default=4,
            show_default=True,
            help="Suspects (jobs whose worker died with them) run at once, each in a child "
            "process of its own.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


# Async handlers share one event loop and mostly wait on I/O: 100 at once costs a
# worker little and keeps Redis busy (at 10, about half the throughput on loopback and a
# sixth across a 1 ms network, in the benchmark). A sync handler takes a thread (or a
# process) for its whole run, so its default stays at 10.
ASYNC_CONCURRENCY, SYNC_CONCURRENCY = 100, 10


def default_concurrency(tasks: Tasks) -> int:
    """100 when every handler runs on the worker's loop, else 10."""
    on_loop = all(
        task.is_async and task.executor is None and task.batch_size is None
        for task in tasks.handlers.values()
    )
    return ASYNC_CONCURRENCY if on_loop and tasks.handlers else SYNC_CONCURRENCY


def execution_settings(concurrency: int | str, options: dict[str, Any]) -> dict[str, Any]:
    """WorkerSettings' fields from the concurrency and execution options."""
    memory = options.pop("max_memory_per_child", None)
    auto = concurrency == "auto"
    return {
        **options,
        "concurrency": 10 if auto else concurrency,
        "auto_concurrency": auto,
        "max_memory_per_child": None if memory is None else memory << 20,
    }


@click.command()
@click.argument("target")
@url_option
@click.option(
    "-c",
    "--concurrency",
    type=CONCURRENCY,
    default=None,
    help="Jobs at once, or 'auto': as many as raise throughput, between --min and --max. "
    "[default: 100 when every task is async (they wait on I/O on one loop), "
    "else 10 (sync handlers each take a thread or a process)]",
)
@click.option(
    "--lease", type=click.FloatRange(min=0.2), default=30.0, show_default=True,
    help="Lease length, seconds.",
)  # fmt: skip
@click.option(
    "--grace", type=click.FloatRange(min=0), default=30.0, show_default=True,
    help="SIGTERM grace, seconds.",
)  # fmt: skip
@click.option("--burst", is_flag=True, help="Drain the queue, then exit.")
@click.option(
    "--queues",
    default=None,
    help="Serve several queues: high,default,low (strict order: a queue only when those "
    "before it have nothing to claim) or high:5,default:3,low:1 (weights: claims shared in "
    "proportion). Each queue's Tasks object is found in TARGET's module.",
)
@click.option("--failures", is_flag=True, help="Run the failure handlers' jobs instead.")
@click.option(
    "--metrics-port",
    type=int,
    default=None,
    help="Serve Prometheus metrics on this port (the prometheus extra).",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="The address --metrics-port listens on: 0.0.0.0 (or ::) for a Prometheus on another host.",
)
@click.option(
    "--wait-for-redis",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="Exit (code 2) if Redis cannot be reached within SECONDS at start "
    "[default: keep trying, saying so at WARNING].",
)
@click.option(
    "--metrics-history/--no-metrics-history",
    default=True,
    show_default=True,
    help="Send run and wait times to the queue's metrics history (outcome counts are always kept).",
)
@execution_options
def worker(
    target: str,
    url: str | None,
    concurrency: int | str | None,
    lease: float,
    grace: float,
    burst: bool,
    queues: str | None,
    failures: bool,
    metrics_port: int | None,
    metrics_host: str,
    wait_for_redis: float | None,
    metrics_history: bool,
    **execution: Any,
) -> None:
    """Run a worker for the tasks at TARGET (module:attribute)."""
    tasks = load_tasks(target)
    served: list[Tasks] = [tasks]
    weights: tuple[int, ...] = ()
    if queues is not None:
        names, weights = parse_queues(queues)
        served = tasks_of_queues(target, tasks, names)
    if concurrency is None:  # several queues: 100 only if every queue's handlers run on the loop
        concurrency = min(default_concurrency(each) for each in served)
    settings = WorkerSettings(
        lease=lease,
        grace=grace,
        burst=burst,
        failures=failures,
        **execution_settings(concurrency, execution),
        metrics=metrics_history,
        weights=weights,
        wait_for_redis=wait_for_redis,
    )
    # From here until the worker's own handlers are in place (Worker.run), a SIGTERM or
    # Ctrl-C waits, then stops the worker gracefully: a deploy may stop it as soon as
    # its metrics port answers.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    with ExitStack() as stack:
        resolved = redis_url(url or next((t.url for t in served if t.url), None), stack)
        hooks = []
        if metrics_port is not None:
            hooks.append(
                metrics_endpoint((metrics_host, metrics_port), served, resolved, failures, stack)
            )
        run = Worker(served, url=resolved, settings=settings, hooks=hooks)
        for hook in hooks:
            hook.watch_concurrency(lambda: run.concurrency)
        for position, each in enumerate(served):
            share = f" (weight {weights[position]})" if weights else ""
            click.echo(
                f"worker {run.id}: queue {each.queue_name!r}{share}, tasks {sorted(each.handlers)}"
            )
        if not logging.getLogger("conveyor.jobs").isEnabledFor(logging.INFO):
            click.echo(f"worker {run.id}: -v logs a line per job (failures are logged anyway)")
        try:
            run.run_sync()
        except ConnectionLostError as exc:  # only with --wait-for-redis: else it keeps trying
            click.echo(f"Error: {exc}", err=True)
            sys.exit(2)
        click.echo(f"worker {run.id}: {run.processed} completed, {run.failed} failed")
    # A sync handler still running past the grace period was given back to the
    # queue; its thread cannot be cancelled, so end the process without joining it.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def metrics_endpoint(
    where: tuple[str, int], served: list[Tasks], url: str, failures: bool, stack: ExitStack
) -> PrometheusHook:
    """Serve the worker's Prometheus metrics (and its queues') on `where`
    (host, port); the hook that feeds them."""
    try:
        from conveyor.integrations.prometheus import worker_endpoint
    except ImportError as exc:
        raise click.UsageError(
            f"--metrics-port needs prometheus-client: pip install 'conveyor[prometheus]' ({exc})"
        ) from exc
    clients = [
        stack.enter_context(Queue(t.queue_name, url=url, settings=t.settings)) for t in served
    ]
    lanes = [q.failure_lane() if failures else q for q in clients]
    host, port = where
    tasks = {t.queue_name: sorted(t.handlers) for t in served}
    try:
        hook = worker_endpoint(port, lanes, addr=host, tasks=tasks)
    except OSError as exc:  # a bad address, or the port taken
        raise click.UsageError(f"--metrics-host/--metrics-port {host}:{port}: {exc}") from exc
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"Prometheus metrics on http://{shown}:{port}/metrics", err=True)
    return hook

"""python manage.py conveyor_worker [--queue NAMES] [--backend ALIAS] [--concurrency N] [--burst]"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from conveyor.errors import ConveyorError
from conveyor.integrations.django._compat import task_backends
from conveyor.integrations.django.backend import ConveyorBackend
from conveyor.integrations.django.runner import conveyor_tasks, tasks_line
from conveyor.worker import Worker, WorkerSettings
from conveyor.worker.queues import parse_queue_spec


class Command(BaseCommand):
    help = "Run a Conveyor worker for the tasks of a django.tasks backend (SIGTERM stops it)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--backend", default="default", help="the TASKS alias (default)")
        parser.add_argument(
            "--queue",
            default="default",
            help="the queue to work (default), or several: high,default,low (strict order: a "
            "queue only when those before it have nothing to claim) or high:5,default:3,low:1 "
            "(weights: claims shared in proportion)",
        )
        parser.add_argument("--concurrency", type=int, default=10, help="jobs at once (10)")
        parser.add_argument("--burst", action="store_true", help="drain the queues, then exit")

    def handle(self, *args: Any, **options: Any) -> None:
        backend = task_backends[options["backend"]]
        if not isinstance(backend, ConveyorBackend):
            raise CommandError(f"task backend {options['backend']!r} is not a ConveyorBackend")
        try:
            names, weights = parse_queue_spec(options["queue"])
        except ConveyorError as exc:
            raise CommandError(f"--queue: {exc}") from exc
        unknown = [name for name in names if name not in backend.queues]
        if unknown:
            raise CommandError(
                f"queue(s) {unknown} not in the backend's QUEUES {sorted(backend.queues)}"
            )
        served = [conveyor_tasks(backend, name) for name in names]
        try:
            settings = WorkerSettings(
                concurrency=options["concurrency"], burst=options["burst"], weights=weights
            )
            worker = Worker(served, url=backend.url, settings=settings)
            for position, name in enumerate(names):
                share = f" (weight {weights[position]})" if weights else ""
                self.stdout.write(
                    f"conveyor worker {worker.id}: queue {name!r}{share}, "
                    + tasks_line(backend, name)
                )
            worker.run_sync()
        except ConveyorError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"{worker.processed} completed, {worker.failed} failed")

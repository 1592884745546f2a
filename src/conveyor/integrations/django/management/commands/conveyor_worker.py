"""python manage.py conveyor_worker [--queue NAME] [--backend ALIAS] [--concurrency N] [--burst]"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from conveyor.errors import ConveyorError
from conveyor.integrations.django._compat import task_backends
from conveyor.integrations.django.backend import ConveyorBackend
from conveyor.integrations.django.runner import conveyor_tasks
from conveyor.worker import Worker, WorkerSettings


class Command(BaseCommand):
    help = "Run a Conveyor worker for the tasks of a django.tasks backend (SIGTERM stops it)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--backend", default="default", help="the TASKS alias (default)")
        parser.add_argument("--queue", default="default", help="the queue to work (default)")
        parser.add_argument("--concurrency", type=int, default=10, help="jobs at once (10)")
        parser.add_argument("--burst", action="store_true", help="drain the queue, then exit")

    def handle(self, *args: Any, **options: Any) -> None:
        backend = task_backends[options["backend"]]
        if not isinstance(backend, ConveyorBackend):
            raise CommandError(f"task backend {options['backend']!r} is not a ConveyorBackend")
        queue = options["queue"]
        if queue not in backend.queues:
            raise CommandError(f"queue {queue!r} is not in the backend's QUEUES")
        tasks = conveyor_tasks(backend, queue)
        try:
            settings = WorkerSettings(concurrency=options["concurrency"], burst=options["burst"])
            worker = Worker(tasks, url=backend.url, settings=settings)
            self.stdout.write(f"conveyor worker {worker.id}: {tasks!r}")
            worker.run_sync()
        except ConveyorError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"{worker.processed} completed, {worker.failed} failed")

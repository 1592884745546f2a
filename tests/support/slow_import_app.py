"""A process handler whose module takes 0.4 s to import: a fresh child pays
that before it can begin the first job (see test_processes_execution)."""

from __future__ import annotations

import os
import time

from conveyor.client.tasks import Tasks

IMPORT_SECONDS = 0.4
time.sleep(IMPORT_SECONDS)

tasks = Tasks("slow-import-app")


@tasks.task(executor="process", max_failures=1)
def naps(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()

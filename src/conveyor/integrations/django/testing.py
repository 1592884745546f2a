"""Django's test runner with a private Redis for Conveyor's task backends:

    # settings.py
    TEST_RUNNER = "conveyor.integrations.django.testing.ConveyorTestRunner"

`manage.py test` then starts a redis-server of its own (free 127.0.0.1 port, temp dir, no
persistence), points every ConveyorBackend of TASKS and CONVEYOR_REDIS_URL at it for the run,
and stops it at the end: tests never write to the Redis that settings name.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from django.conf import settings
from django.test.runner import DiscoverRunner

from conveyor.integrations.django._compat import task_backends
from conveyor.integrations.django.backend import ConveyorBackend
from conveyor.integrations.redis_server import RedisProcess

URL_VARIABLE = "CONVEYOR_REDIS_URL"
BACKEND_PATH = f"{ConveyorBackend.__module__}.{ConveyorBackend.__qualname__}"


class ConveyorTestRunner(DiscoverRunner):
    """A DiscoverRunner whose run has a private redis-server for Conveyor."""

    def setup_test_environment(self, **kwargs: Any) -> None:
        super().setup_test_environment(**kwargs)
        self._data_dir = tempfile.TemporaryDirectory(prefix="conveyor-django-test-")
        self._redis = RedisProcess(data_dir=self._data_dir.name).start()
        self._saved = (settings.TASKS, os.environ.get(URL_VARIABLE))
        settings.TASKS = private_tasks(settings.TASKS, self._redis.url)
        os.environ[URL_VARIABLE] = self._redis.url
        _reset_backends()

    def teardown_test_environment(self, **kwargs: Any) -> None:
        tasks, url = self._saved
        _reset_backends()
        settings.TASKS = tasks
        if url is None:
            os.environ.pop(URL_VARIABLE, None)
        else:
            os.environ[URL_VARIABLE] = url
        self._redis.stop()
        self._data_dir.cleanup()
        super().teardown_test_environment(**kwargs)


def private_tasks(tasks: dict[str, Any], url: str) -> dict[str, Any]:
    """TASKS with every ConveyorBackend's OPTIONS['URL'] set to `url`."""
    changed = {}
    for alias, params in tasks.items():
        if params.get("BACKEND") == BACKEND_PATH:
            params = {**params, "OPTIONS": {**params.get("OPTIONS", {}), "URL": url}}
        changed[alias] = params
    return changed


def _reset_backends() -> None:
    """Close and forget the backends made from the old TASKS, so that the next use reads the
    new one (Django caches the setting and the backends on its handler; no signal resets it)."""
    for backend in task_backends.all(initialized_only=True):
        if isinstance(backend, ConveyorBackend):
            backend.close()
        del task_backends[backend.alias]
    state = vars(task_backends)
    state["_settings"] = None  # read settings.TASKS again
    state.pop("settings", None)

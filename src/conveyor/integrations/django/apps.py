"""The app config of `conveyor.integrations.django` (in INSTALLED_APPS)."""

from __future__ import annotations

from django.apps import AppConfig


class ConveyorConfig(AppConfig):
    name = "conveyor.integrations.django"
    label = "conveyor"
    verbose_name = "Conveyor"

    def ready(self) -> None:
        # Django registers the task backends' checks (manage.py check) when django.tasks is
        # first imported: import it here, or Conveyor's checks never run on Django 6.
        from conveyor.integrations.django import _compat  # noqa: F401

"""Settings of the test project: PostgreSQL from CONVEYOR_DJANGO_DB (a database the test creates
and drops), Redis from CONVEYOR_REDIS_URL (a private server the test starts)."""

import os

import django

SECRET_KEY = "conveyor-tests-only"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["conveyor.integrations.django", "shop"]
if django.VERSION < (6,):
    INSTALLED_APPS.append("django_tasks")  # the backport of django.tasks

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "HOST": "127.0.0.1",
        "PORT": 5432,
        "USER": "postgres",
        "NAME": os.environ["CONVEYOR_DJANGO_DB"],
        "TEST": {"NAME": os.environ["CONVEYOR_DJANGO_DB"]},
    }
}

TASKS = {
    "default": {
        "BACKEND": "conveyor.integrations.django.backend.ConveyorBackend",
        "QUEUES": ["default", "mail"],
        "OPTIONS": {"JOB_OPTIONS": {"max_failures": 1}},
    }
}

"""Settings of the test project: PostgreSQL from CONVEYOR_DJANGO_DB (a database the test creates
and drops). Redis: the URL below stands for a development server that is not there; Conveyor's
test runner gives the run a private redis-server instead. CONVEYOR_TEST_BROKEN_OPTION adds an
unknown option, for `manage.py check` to report."""

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

DEVELOPMENT_REDIS = "redis://127.0.0.1:9/0"
TEST_RUNNER = "conveyor.integrations.django.testing.ConveyorTestRunner"
TASKS = {
    "default": {
        "BACKEND": "conveyor.integrations.django.backend.ConveyorBackend",
        "QUEUES": ["default", "mail"],
        "OPTIONS": {"URL": DEVELOPMENT_REDIS, "JOB_OPTIONS": {"max_failures": 1}},
    },
    "retrying": {
        "BACKEND": "conveyor.integrations.django.backend.ConveyorBackend",
        "QUEUES": ["default"],
        "OPTIONS": {
            "URL": DEVELOPMENT_REDIS,
            "JOB_OPTIONS": {"max_failures": 3, "min_backoff": 0, "max_backoff": 0},
        },
    },
}
if os.environ.get("CONVEYOR_TEST_BROKEN_OPTION"):
    TASKS["default"]["OPTIONS"]["BOGUS"] = 1

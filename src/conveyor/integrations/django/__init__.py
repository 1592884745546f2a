"""Conveyor as a backend of Django's tasks framework (``django.tasks``, Django 6; on Django 5.2
the ``django-tasks`` backport, same API), and the ``conveyor_worker`` management command.

    INSTALLED_APPS = [..., "conveyor.integrations.django"]
    TASKS = {
        "default": {
            "BACKEND": "conveyor.integrations.django.backend.ConveyorBackend",
            "QUEUES": ["default", "emails"],       # each a Conveyor queue
            "OPTIONS": {"URL": "redis://10.0.0.5:6379/0"},   # default: CONVEYOR_REDIS_URL
        }
    }

    python manage.py conveyor_worker --queue emails   # or emails,default / emails:3,default:1

    TEST_RUNNER = "conveyor.integrations.django.testing.ConveyorTestRunner"  # a private Redis

Details and every option: ConveyorBackend's docstring (backend.py).
"""

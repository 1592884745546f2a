"""ConveyorBackend in a real Django project (tests/frameworks/django_project), run by Django's
own test runner in a subprocess: PostgreSQL on 127.0.0.1:5432 (a database of our own, created
and dropped by the runner) and a private redis-server."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest

from support.servers import ServerFactory

PROJECT = Path(__file__).resolve().parent / "django_project"
POSTGRES = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"


def _databases() -> set[str]:
    with psycopg.connect(POSTGRES) as connection:
        rows = connection.execute("SELECT datname FROM pg_database").fetchall()
    return {row[0] for row in rows}


def test_the_django_project_suite(server_factory: ServerFactory) -> None:
    server = server_factory()
    database = f"conveyor_django_{uuid.uuid4().hex[:10]}"
    env = {
        **os.environ,
        "CONVEYOR_REDIS_URL": server.url,
        "CONVEYOR_TEST_REDIS_PID": str(server.pid),
        "CONVEYOR_DJANGO_DB": database,
        "PYTHONPATH": str(PROJECT),
    }
    run = subprocess.run(
        [sys.executable, "manage.py", "test", "shop", "--noinput", "-v", "2"],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = run.stdout + run.stderr
    assert run.returncode == 0, report
    assert "Ran 8 tests" in report and "OK" in report, report
    assert database not in _databases()  # the runner dropped it


@pytest.fixture(autouse=True)
def _needs_postgres() -> None:
    try:
        _databases()
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL on 127.0.0.1:5432 is needed: {exc}", pytrace=False)

"""ConveyorBackend in a real Django project (tests/frameworks/django_project), run by Django's
own test runner in a subprocess: PostgreSQL on 127.0.0.1:5432 (a database of our own, created
and dropped by the runner) and the private redis-server of Conveyor's test runner.

Twice: on this Python (Django 5.2 and the django-tasks backport on Python 3.11), and on Django 6
in a second virtualenv (.venv-django6/, built once with pip) on a Python >= 3.12 found on the
machine: CONVEYOR_DJANGO6_PYTHON, python3.13 / python3.12 on PATH, or pyenv's versions."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = Path(__file__).resolve().parent / "django_project"
POSTGRES = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
DJANGO6_VENV = ROOT / ".venv-django6"
# the first run builds the Django 6 virtualenv (about a minute; seconds once pip has its wheels)
pytestmark = pytest.mark.timeout(900)


def _databases() -> set[str]:
    with psycopg.connect(POSTGRES) as connection:
        rows = connection.execute("SELECT datname FROM pg_database").fetchall()
    return {row[0] for row in rows}


@pytest.fixture(scope="module", params=["this-python", "django-6"])
def python(request: pytest.FixtureRequest) -> str:
    """The interpreter that runs the project: this one, or the Django 6 virtualenv's."""
    if request.param == "this-python":
        return sys.executable
    base = _python_312_or_newer()
    if base is None:
        pytest.skip(
            "Django 6 suite skipped: no Python >= 3.12 found (set CONVEYOR_DJANGO6_PYTHON, or "
            "put python3.12 / python3.13 on PATH, or install one with pyenv)"
        )
    return _django6_venv(base)


def _run(python: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "manage.py", *args],
        cwd=PROJECT,
        env={**os.environ, "PYTHONPATH": f"{PROJECT}{os.pathsep}{ROOT / 'src'}", **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_django_project_suite(python: str) -> None:
    database = f"conveyor_django_{uuid.uuid4().hex[:10]}"
    run = _run(python, "test", "shop", "--noinput", "-v", "2", CONVEYOR_DJANGO_DB=database)
    report = run.stdout + run.stderr
    assert run.returncode == 0, report
    assert "Ran 10 tests" in report and "OK" in report, report
    assert database not in _databases()  # the runner dropped it


def test_manage_py_check_runs_conveyors_checks(python: str) -> None:
    run = _run(python, "check", CONVEYOR_DJANGO_DB="unused")
    assert run.returncode == 0, run.stdout + run.stderr
    run = _run(python, "check", CONVEYOR_DJANGO_DB="unused", CONVEYOR_TEST_BROKEN_OPTION="1")
    report = run.stdout + run.stderr
    assert run.returncode == 1, report
    assert "conveyor.E001" in report and "unknown OPTIONS ['BOGUS']" in report, report


def _python_312_or_newer() -> str | None:
    explicit = os.environ.get("CONVEYOR_DJANGO6_PYTHON")
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [explicit] if explicit else []
    candidates += [shutil.which(name) for name in ("python3.13", "python3.12")]
    candidates += [str(p) for p in sorted(pyenv.glob("3.1[2-9]*/bin/python3"), reverse=True)]
    for candidate in candidates:
        if candidate and _is_312_or_newer(candidate):
            return candidate
    return None


def _is_312_or_newer(python: str) -> bool:
    try:
        check = subprocess.run(
            [python, "-c", "import sys; sys.exit(sys.version_info < (3, 12))"],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return check.returncode == 0  # a pyenv shim without that version installed fails here


def _django6_venv(base: str) -> str:
    """.venv-django6/bin/python with pyproject's dependencies and Django 6 (Conveyor itself
    comes from src/ on PYTHONPATH); rebuilt when the requirements change."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [
        *project["dependencies"],
        *project["optional-dependencies"]["django"],
        "django>=6",
        "psycopg[binary]>=3.1",
    ]
    stamp = DJANGO6_VENV / ".conveyor-requirements"
    python = DJANGO6_VENV / "bin" / "python"
    if python.exists() and stamp.exists() and stamp.read_text() == "\n".join(wanted):
        return str(python)
    shutil.rmtree(DJANGO6_VENV, ignore_errors=True)
    steps = [
        [base, "-m", "venv", str(DJANGO6_VENV)],
        [str(python), "-m", "pip", "install", "-q", *wanted],
    ]
    for step in steps:
        built = subprocess.run(step, capture_output=True, text=True, timeout=600)
        if built.returncode != 0:
            pytest.fail(f"building {DJANGO6_VENV} failed: {step}\n{built.stdout}{built.stderr}")
    stamp.write_text("\n".join(wanted))
    return str(python)


@pytest.fixture(autouse=True)
def _needs_postgres() -> None:
    try:
        _databases()
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL on 127.0.0.1:5432 is needed: {exc}", pytrace=False)

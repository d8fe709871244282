# rota's developer commands. `make help` lists them; `make check` runs before every commit.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
PYTEST_ARGS ?=
# Test processes at once: twice the cores, since most tests wait on PostgreSQL or a process.
XDIST ?= $(shell echo $$(( $$(nproc) * 2 )))
SOAK_LOG := .soak.log
SOAK_SHOWN := 500
SOAK_TMP := .soak-tmp
# Run after the soak, beside the rest of the tests (test: says why): about as long together.
BESIDE := tests/chaos
# Chaos tests at once: each runs a fleet of worker processes and a PostgreSQL of its own.
BESIDE_XDIST ?= 2
BESIDE_LOG := .beside.log

.DEFAULT_GOAL := help

.PHONY: help
help: ## List every target with what it does
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(PY):
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Reinstall only when the dependencies change.
$(VENV)/.installed: pyproject.toml | $(PY)
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

.PHONY: setup
setup: $(VENV)/.installed ## Create .venv and install rota with its development dependencies

$(VENV)/.installed-docs: pyproject.toml | $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[dev,docs]'
	touch $@

.PHONY: docs
docs: $(VENV)/.installed-docs ## Build the documentation site into build/site (warnings are errors)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

.PHONY: setup-bench
setup-bench: setup ## Also install the peers measured by the benchmarks
	$(BIN)/pip install --quiet -e '.[dev,bench]'

.PHONY: fmt
fmt: ## Format and autofix the code
	$(BIN)/ruff format src tests bench examples docs/hooks
	$(BIN)/ruff check --fix src tests bench examples docs/hooks

.PHONY: lint
lint: ## ruff, format check, import layers
	$(BIN)/ruff check src tests bench examples docs/hooks
	$(BIN)/ruff format --check src tests bench examples docs/hooks
	$(BIN)/lint-imports

.PHONY: typecheck
typecheck: ## mypy --strict on src
	$(BIN)/mypy

.PHONY: check
check: setup lint typecheck test-fast ## Everything to run before a commit: lint, types, fast tests

.PHONY: test-fast
test-fast: setup ## Unit and contract tests (seconds)
	$(BIN)/pytest -q -x -n $(XDIST) tests/unit tests/contract -m "not slow and not browser" $(PYTEST_ARGS)

.PHONY: test
test: setup ## The whole test suite (PostgreSQL tests skip with a hint when no server is found)
	@# Two lanes at once, as the tests mostly wait (on their processes, PostgreSQL, a browser):
	@# one runs the soak (5 minutes under CI=true, skipped otherwise), then $(BESIDE) in
	@# $(BESIDE_XDIST) processes; the other everything else in $(XDIST), about as long. A lane that passes prints one line; a failure
	@# prints its log (the soak's last $(SOAK_SHOWN) lines, its workers' logs and history kept
	@# in its own temporary directory). pytest's exit 5 (nothing collected, as under -k) passes.
	@rm -rf $(SOAK_TMP) $(BESIDE_LOG); \
	( $(BIN)/pytest -q -m soak -p no:cacheprovider --basetemp=$(SOAK_TMP) $(PYTEST_ARGS) \
		> $(SOAK_LOG) 2>&1; soaked=$$?; \
	  $(BIN)/pytest -q -n $(BESIDE_XDIST) -m "not soak" -p no:cacheprovider $(BESIDE) $(PYTEST_ARGS) \
		> $(BESIDE_LOG) 2>&1; beside=$$?; \
	  exit $$(( (soaked != 0 && soaked != 5) + 2 * (beside != 0 && beside != 5) )) \
	) & lane=$$!; \
	$(BIN)/pytest -q -n $(XDIST) -m "not soak" $(addprefix --ignore=,$(BESIDE)) $(PYTEST_ARGS); rest=$$?; \
	[ $$rest -eq 5 ] && rest=0; \
	wait $$lane; failed=$$?; \
	if [ $$((failed & 1)) -eq 0 ]; then \
		echo "== soak: $$(tail -n 1 $(SOAK_LOG))"; rm -rf $(SOAK_LOG) $(SOAK_TMP); \
	else \
		echo "== soak FAILED: the last $(SOAK_SHOWN) of its $$(wc -l < $(SOAK_LOG)) lines"; \
		tail -n $(SOAK_SHOWN) $(SOAK_LOG); \
		echo "== soak FAILED: whole log in $(CURDIR)/$(SOAK_LOG)," \
			"worker logs and history under $(CURDIR)/$(SOAK_TMP)"; \
	fi; \
	if [ $$((failed & 2)) -eq 0 ]; then \
		echo "== $(BESIDE): $$(tail -n 1 $(BESIDE_LOG))"; rm -f $(BESIDE_LOG); \
	else \
		echo "== $(BESIDE) FAILED:"; cat $(BESIDE_LOG); \
		echo "== $(BESIDE) FAILED: log kept in $(CURDIR)/$(BESIDE_LOG)"; \
	fi; \
	test $$rest -eq 0 -a $$failed -eq 0

.PHONY: ci
ci: ## What CI runs on a clean clone (.ci/run): packages, PostgreSQL, lint, types, every test
	./.ci/run

.PHONY: serve
serve: setup ## Run the service with the demo jobs on http://127.0.0.1:8080
	$(BIN)/rota serve --app rota.demo:app

# BENCH_ARGS: e.g. --quick --runs 1 (a harness check), --only drain, or
# --database-url postgresql://user@host:5432/postgres (a given server instead of its own).
BENCH_ARGS ?=

# Oban for Python needs Python 3.12 or later: the benchmarks run it, and DBOS beside it, in a venv
# of their own (bench/peers312.py), made from the Python 3.12 that test-django6 finds. Without
# one, `make bench` measures the others and says why these two were skipped.
VENV_BENCH312 := .venv-bench312

.PHONY: setup-bench312
setup-bench312: ## The Python 3.12 venv of the peers Oban for Python and DBOS (make bench skips them without it)
	@py="$(PY312)"; \
	if [ -z "$$py" ]; then \
		echo "setup-bench312: no Python 3.12 (python3.12 on PATH or under pyenv):" \
			"make bench skips Oban for Python and DBOS" >&2; exit 0; fi; \
	[ -x $(VENV_BENCH312)/bin/python ] || "$$py" -m venv $(VENV_BENCH312); \
	$(VENV_BENCH312)/bin/pip install --quiet -e '.[bench312]' \
		|| echo "setup-bench312: the install failed: make bench skips Oban for Python and DBOS" >&2

.PHONY: bench
bench: setup-bench setup-bench312 ## Benchmarks on a throwaway production-configured PostgreSQL (~45 min); rewrites docs/benchmarks.md
	$(PY) -m bench.run $(BENCH_ARGS)

.PHONY: bench-quick
bench-quick: setup-bench setup-bench312 ## Check the benchmark harness end to end with small loads (figures not publishable)
	$(PY) -m bench.run --quick --runs 1 $(BENCH_ARGS)

# CAPACITY_ARGS: e.g. --quick (a check), --pg-cores 2 --jobs 200000 --processes 4, --checkpoint.
CAPACITY_ARGS ?=

.PHONY: bench-capacity
bench-capacity: setup ## Measure what one primary sustains per PostgreSQL core (prints; writes nothing)
	$(PY) -m bench.capacity $(CAPACITY_ARGS)

.PHONY: bench-profile
bench-profile: setup-bench ## Profile the worker on a no-op drain (py-spy; pg_stat_statements) into bench/results/profile.md
	$(PY) -m bench.profile

.PHONY: bench-pickup
bench-pickup: setup-bench ## Split rota's and PgQueuer's pickup latency into its steps, into bench/results/pickup.md
	$(PY) -m bench.pickup

# DRAIN_SETTINGS_ARGS: e.g. --settings 1000/500,500/250 --processes 2 --runs 3, --quick.
DRAIN_SETTINGS_ARGS ?=

.PHONY: bench-drain-settings
bench-drain-settings: setup ## rota's drain at several concurrency/claim_batch settings, alternated (prints)
	$(PY) -m bench.drain_settings $(DRAIN_SETTINGS_ARGS)

# ACTIVITY_ARGS: e.g. --jobs 10000 --rounds 4.
ACTIVITY_ARGS ?=

.PHONY: bench-activity
bench-activity: setup ## What the kind and queue pages' per-minute tallies add to a completion (prints)
	$(PY) -m bench.activity_cost $(ACTIVITY_ARGS)

# DASHBOARD_ARGS: e.g. --jobs 10000000, --backend postgres.
DASHBOARD_ARGS ?= --jobs 1000000

.PHONY: bench-dashboard
bench-dashboard: setup ## The dashboard's and the API's reads beside 1,000,000 jobs, PostgreSQL and SQLite (prints)
	$(PY) -m bench.dashboard_scale $(DASHBOARD_ARGS)

# SERVE_ARGS: e.g. --greedy-reader --clients 30 --seconds 20.
SERVE_ARGS ?=

.PHONY: bench-serve
bench-serve: setup ## /healthz and leases of `rota serve` under API reads, or beside one greedy reader (prints)
	$(PY) -m bench.serve_load $(SERVE_ARGS)

# SCALE_ARGS: e.g. --scale 10000000 (about 20 min), --only finished, --runs 5.
SCALE_ARGS ?=

# DAY_ARGS: e.g. --speed 50 --hours 6, --quick (a check), --json day.json.
DAY_ARGS ?=

.PHONY: bench-day
bench-day: setup ## A day of 10M jobs and 2,000 hourly schedules, compressed 100x (~15 min)
	$(PY) -m bench.day $(DAY_ARGS)

.PHONY: bench-scale
bench-scale: setup ## Claim, enqueue and prune beside millions of finished and future jobs (into bench/results/scale.md)
	$(PY) -m bench.scale $(SCALE_ARGS)

# Django 6 (django.tasks built in) needs Python 3.12 or later: the Django backend's tests run
# again in a venv of their own, from python3.12 on PATH or the newest 3.12 under pyenv.
VENV_DJANGO6 := .venv-django6
# python3.12 on PATH or the newest 3.12 under pyenv; empty when there is none.
PY312 = $(shell py=""; for p in python3.12 $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.12*/bin/python3.12; do \
	if "$$p" -c "" 2>/dev/null; then py="$$p"; fi; done; echo "$$py")

.PHONY: test-django6
test-django6: ## The Django backend's tests on Django 6 and its own django.tasks (Python 3.12)
	@py="$(PY312)"; \
	if [ -z "$$py" ]; then echo "test-django6: no Python 3.12 (python3.12 on PATH or under pyenv)" >&2; exit 2; fi; \
	echo "Django 6 on $$("$$py" --version)"; \
	[ -x $(VENV_DJANGO6)/bin/python ] || "$$py" -m venv $(VENV_DJANGO6); \
	$(VENV_DJANGO6)/bin/pip install --quiet -e '.[dev,django]' 'django>=6'; \
	$(VENV_DJANGO6)/bin/python -c "import django, django.tasks; print('django', django.__version__)"; \
	$(VENV_DJANGO6)/bin/python -m pytest -q -p no:cacheprovider \
		tests/unit/test_django_backend.py tests/integration/test_django.py

# REGRESSION_ARGS: e.g. --refs d3410a8,HEAD --runs 5 --jobs 50000, --quick.
REGRESSION_ARGS ?=

.PHONY: bench-regression
bench-regression: setup ## Drain, enqueue and claim cost at earlier commits and at HEAD, side by side (prints)
	$(PY) -m bench.regression $(REGRESSION_ARGS)

# DURABLE_ARGS: e.g. --runs 5 --jobs 5000, --quick (a check), --no-write.
DURABLE_ARGS ?=

.PHONY: bench-durable
bench-durable: setup-bench ## 10-step durable jobs per second beside DBOS (into bench/durable.md)
	$(PY) -m bench.durable $(DURABLE_ARGS)

# STARTUP_ARGS: e.g. --before ../other-checkout/src --runs 11 --write.
STARTUP_ARGS ?=

.PHONY: bench-startup
bench-startup: setup ## Import, --help and a worker's first claim, median of fresh processes (prints)
	$(PY) -m bench.startup $(STARTUP_ARGS)

# TAKEOVER_ARGS: e.g. --kills 20, --lease 10 --rescue 2, --write (into bench/takeover.md).
TAKEOVER_ARGS ?=

.PHONY: bench-takeover
bench-takeover: setup ## SIGKILL workers holding jobs and restart them: takeover and first claim (prints)
	$(PY) -m bench.takeover $(TAKEOVER_ARGS)

.PHONY: bench-workflows
bench-workflows: setup ## A 10,000-parent fan-in and a 1,000-job chain beside plain jobs (prints)
	$(PY) -m bench.workflows

.PHONY: clean
clean: ## Remove caches and build output
	rm -rf build dist .pytest_cache .mypy_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

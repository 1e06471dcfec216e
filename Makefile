# The two commands a newcomer needs: `make run` and `make test`.
# uv is bootstrapped with pip into .tools/ (pinned), then installs the locked
# dependencies (uv.lock) into .venv/ with the project editable.

PYTHON ?= python3
UV_VERSION := 0.13.8
TOOLS := .tools
UV := $(TOOLS)/bin/uv
VENV := .venv
STAMP := $(VENV)/.sievemq-synced
export UV_PROJECT_ENVIRONMENT := $(VENV)

.PHONY: setup chromium run test lint bench bench-filter bench-vs-rabbitmq clean

setup: $(STAMP)

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet uv==$(UV_VERSION)

$(STAMP): $(UV) pyproject.toml uv.lock
	$(UV) sync --frozen --all-extras --quiet
	touch $(STAMP)

run: setup
	$(VENV)/bin/sievemq serve

test: setup chromium
	$(VENV)/bin/python -m pytest -q

# the dashboard tests drive Debian's chromium through Playwright (never `playwright install`)
chromium:
	@test -x /usr/bin/chromium || (apt-get install -y chromium || sudo apt-get install -y chromium)

lint: setup
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/mypy

bench: setup
	$(VENV)/bin/python -m bench

# through a real server with the Go load generator of ../shared/peers
bench-filter: setup
	$(VENV)/bin/python -m bench filter_bandwidth filter_scan filter_throughput

bench-vs-rabbitmq: setup
	$(VENV)/bin/python -m bench.vs_rabbitmq

clean:
	rm -rf $(VENV) $(TOOLS) .pytest_cache .mypy_cache .ruff_cache

# The two commands a newcomer needs: `make run` and `make test`.
# uv is bootstrapped with pip into .tools/ (pinned), then installs the locked
# dependencies (uv.lock) into .venv/ with the project editable: `make run` the broker's runtime
# only (no dev group, no extras), `make setup` (and so test, lint, bench) everything. `make test`
# also installs the Node clients amqplib and rabbitmq-stream-js-client
# (tests/integration/data/node, from its package-lock.json) with npm ci.

PYTHON ?= python3
UV_VERSION := 0.13.8
TOOLS := .tools
UV := $(TOOLS)/bin/uv
VENV := .venv
STAMP := $(VENV)/.sievemq-synced
RUN_STAMP := $(VENV)/.sievemq-runtime
export UV_PROJECT_ENVIRONMENT := $(VENV)
NODE_DIR := tests/integration/data/node
NODE_STAMP := $(NODE_DIR)/node_modules/.package-lock.json

.PHONY: setup node-deps chromium etcd promtool faketime cluster-faults chaos run test lint docs screenshots bench bench-filter bench-vs-rabbitmq bench-replication-vs-rabbitmq bench-spark bench-spark-latency soak clean

setup: $(STAMP)

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet uv==$(UV_VERSION)

$(STAMP): $(UV) pyproject.toml uv.lock
	$(UV) sync --frozen --all-extras --quiet
	touch $(STAMP)

# the runtime alone (a tenth of everything: no pyspark, pyarrow, test clients or linters).
# --inexact keeps what `make setup` installed, so `make run` after `make test` removes nothing
# and `make test` after `make run` only adds; each has its own stamp.
$(RUN_STAMP): $(UV) pyproject.toml uv.lock
	$(UV) sync --frozen --no-dev --inexact --quiet
	touch $(RUN_STAMP)

run: $(RUN_STAMP)
	$(VENV)/bin/sievemq serve

# npm writes node_modules/.package-lock.json on every install: the stamp of `npm ci`
$(NODE_STAMP): $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "make test needs Node.js and npm (the Node" \
		"client tests in $(NODE_DIR)); install them, e.g. apt-get install nodejs npm" >&2; exit 1; }
	cd $(NODE_DIR) && npm ci --no-audit --no-fund

node-deps: $(NODE_STAMP)

# the summary: per-file progress, a line per failure/skip (-ra) and the 10 slowest tests.
# One pytest process, Spark included (docs/testing.md: why a foreachBatch job once hung after
# the rest of the suite, and what fixed it).
test: setup node-deps chromium promtool etcd faketime
	$(VENV)/bin/python -m pytest --durations=10

# the dashboard tests drive Debian's chromium through Playwright (never `playwright install`)
chromium:
	@test -x /usr/bin/chromium || { export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && apt-get install -y -qq chromium; }

# the cluster tests start Debian's etcd (3.4) themselves (sievemq.testing.etcd): only the
# binary is needed, no service
etcd:
	@test -x /usr/bin/etcd || { export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && apt-get install -y -qq etcd-server; }

# the cluster's clock test preloads Debian's libfaketime into one node (a wall clock that jumps)
faketime:
	@test -x /usr/bin/faketime || { export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && apt-get install -y -qq faketime; }

# the cluster's fault tests, each fault repeated ROUNDS times (`make cluster-faults ROUNDS=10`);
# the measured figures (longest gap in the other nodes' confirms...) go to cluster-faults.jsonl
ROUNDS ?= 5
cluster-faults: setup etcd faketime
	rm -f cluster-faults.jsonl
	SIEVEMQ_CLUSTER_FAULT_ROUNDS=$(ROUNDS) SIEVEMQ_CLUSTER_FAULT_REPORT=$(CURDIR)/cluster-faults.jsonl \
		$(VENV)/bin/python -m pytest tests/integration/test_cluster/test_faults.py -p no:cacheprovider \
		-o timeout=$$(( 300 * $(ROUNDS) )) -v

# the chaos suite (tests/chaos/): three nodes and etcd in a network namespace of their own
# (unshare -n: root), faults in rounds for MINUTES under load, then the checkers; JSON out, the
# history and the nodes' logs in .chaos/<run>/, exit 1 on any finding (`make chaos MINUTES=30`;
# one short round runs in `make test`)
chaos: setup etcd faketime
	$(VENV)/bin/python -m tests.chaos.run --minutes $(MINUTES)

# promtool checks deploy/prometheus.yml (tests/test_compose.py): taken out of Debian's
# prometheus package without installing it (no daemon, no postinst)
PROMTOOL := $(TOOLS)/bin/promtool
promtool: $(PROMTOOL)

$(PROMTOOL):
	@mkdir -p $(TOOLS)/deb $(TOOLS)/bin
	cd $(TOOLS)/deb && { apt-get download prometheus 2>/dev/null || \
		{ apt-get update -qq && apt-get download prometheus; }; }
	dpkg-deb -x $(TOOLS)/deb/prometheus_*.deb $(TOOLS)/deb/root
	cp $(TOOLS)/deb/root/usr/bin/promtool $(PROMTOOL)
	rm -rf $(TOOLS)/deb

lint: setup
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/mypy

# the pictures of the tree in README.md and docs/architecture.md, drawn from the code
# (tests/test_architecture.py fails when one is stale)
docs: setup
	$(VENV)/bin/python tests/test_architecture.py

# docs/dashboard-*.png, taken by chromium from a scratch node with some traffic
screenshots: setup chromium
	$(VENV)/bin/python -m bench.dashboard_screenshots docs

bench: setup
	$(VENV)/bin/python -m bench

# through a real server with the Go load generator of bench/loadgen (built on first use;
# SIEVEMQ_BENCH_PEERS=1 or --peers: an older copy of the kit outside the repository)
bench-filter: setup
	$(VENV)/bin/python -m bench filter_bandwidth filter_scan filter_throughput

bench-vs-rabbitmq: setup
	$(VENV)/bin/python -m bench.vs_rabbitmq

# three SieveMQ nodes (with etcd) beside a three-node RabbitMQ cluster: replicated streams
# and quorum queues, confirm latency, publish rate, CPU per message, failover (JSON out)
bench-replication-vs-rabbitmq: setup etcd
	$(VENV)/bin/python -m bench.replication_vs_rabbitmq

# Spark export on local[2] beside the raw read and the Arrow decode (needs Java)
bench-spark: setup
	$(VENV)/bin/python -m bench spark_export

# publishers, named and filtered consumers, the server SIGKILLed at random and restarted
# (`make soak MINUTES=30`; JSON out, exit 1 on any finding; a short one runs in `make test`)
MINUTES ?= 30
soak: setup
	$(VENV)/bin/python -m bench.soak --minutes $(MINUTES)

# publish -> streaming query (1 s trigger) -> foreachBatch sink, through a real gateway
bench-spark-latency: setup
	$(VENV)/bin/python -m bench spark_stream_latency

clean:
	rm -rf $(VENV) $(TOOLS) $(NODE_DIR)/node_modules .pytest_cache .mypy_cache .ruff_cache

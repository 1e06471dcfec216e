#!/bin/bash
# Make the kit bench/cluster_scaling_16_cores.sh needs on a machine without a package registry,
# here (where pip reaches PyPI and Debian's etcd, RabbitMQ and Go are installed): ./.kit, git-ignored,
# about 60 MB. Then, on the device: carry .kit, run `bash bench/cluster_scaling_16_cores.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
KIT=${KIT:-$PWD/.kit}
rm -rf "$KIT" && mkdir -p "$KIT/wheels"
make -s setup etcd
.tools/bin/uv export --frozen --no-dev --no-hashes --no-emit-project | grep -v '^ *#\|^-e\|^$' > "$KIT/requirements.txt"
echo "pika==$(.venv/bin/python -c 'import pika; print(pika.__version__)')" >> "$KIT/requirements.txt"
.tools/bin/pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  --abi cp312 --abi abi3 --abi none -r "$KIT/requirements.txt" -d "$KIT/wheels"
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || bench/rabbitmq.sh --install-only
# without what the benchmark never loads (SNMP, etcd peer discovery, sources, docs), so the kit
# and the working tree stay inside the 64 MiB a lent machine takes
P=usr/lib/rabbitmq/lib/rabbitmq_server-3.10.8/plugins
tar -C / -cf - --exclude="usr/lib/erlang/lib/snmp-*" --exclude="$P/eetcd-*" \
  --exclude="$P/rabbitmq_peer_discovery_etcd-*" --exclude="$P/rabbitmq_web_*_examples-*" \
  --exclude="usr/lib/erlang/lib/*/src" --exclude="usr/lib/erlang/lib/*/doc" --exclude="usr/lib/erlang/man" \
  usr/lib/erlang usr/lib/rabbitmq | xz -9 -T2 > "$KIT/rmq.tar.xz"
git describe --always --dirty --abbrev=7 > "$KIT/COMMIT"
xz -9 -c /usr/bin/etcd > "$KIT/etcd.xz"
.venv/bin/python -c 'from bench import kit; print(kit.loadgen())' >/dev/null
cp bench/loadgen/sievemq-loadgen "$KIT/loadgen"
cp "${SIEVEMQ_PEERS:-../shared/peers}/rabbitmq.sh" "$KIT/rabbitmq.sh"
du -sh "$KIT"

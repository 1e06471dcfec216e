#!/bin/bash
# bench/cluster_scaling.py on a bigger machine that has Python 3.12 and no package registry, in
# one call: a cluster of one node per core beside one node and RabbitMQ 3.10.8 (K streams, one Go
# load generator per stream, publish with confirms then consume from first; JSON out).
#
# Run from the project's root there, with a kit folder ($KIT, git-ignored: /.kit/) made here
# beforehand by `bench/cluster_kit.sh` and copied along (about 60 MB):
#   $KIT/wheels/       the runtime's wheels for 3.12 and pika's:
#                      `uv export --frozen --no-dev --no-hashes --no-emit-project` plus `pika==1.4.4`,
#                      then `pip download --no-deps --only-binary=:all: --python-version 3.12
#                      --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64
#                      --platform manylinux_2_28_x86_64 --implementation cp --abi cp312 --abi abi3
#                      --abi none -r … -d $KIT/wheels`
#   $KIT/rmq.tar.xz    `tar -C / -cJf rmq.tar.xz usr/lib/erlang usr/lib/rabbitmq` (Debian's rabbitmq-server)
#   $KIT/etcd.xz       `xz -9 -c /usr/bin/etcd` (Debian's etcd-server 3.4, one static binary)
#   $KIT/loadgen       bench/loadgen/sievemq-loadgen built here (bench/loadgen/build.sh)
#   $KIT/rabbitmq.sh   a copy of ../shared/peers/rabbitmq.sh (bench/rabbitmq.sh asks dpkg for the
#                      version, which an unpacked RabbitMQ does not have)
# Knobs: NODES (default: the cores), KS (default 1,4,8,16), N (messages per stream, 100000),
# REPEATS (3), CLUSTER_SIZE (each stream's x-initial-cluster-size, 1: no replicas, like the one
# RabbitMQ node it is compared with; 3: two replicas each), NO_SINGLE (1: leave one node out), LOADGEN_PROCS (GOMAXPROCS of each load generator, 2), VIA (leader | other | both, once forwarding is built), SVPY (an interpreter that
# already has the runtime: a dry run here), OUT (where the results go, /tmp/out).
set -u
KIT=${KIT:-$PWD/.kit}; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
nproc; python3 --version; head -2 /etc/os-release
if [ -z "${SVPY:-}" ]; then
  python3 -m venv --system-site-packages /opt/sv && /opt/sv/bin/pip install -q --no-index --no-deps "$KIT"/wheels/*.whl || exit 1
  SVPY=/opt/sv/bin/python
fi
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || tar -C / -xJf "$KIT/rmq.tar.xz"
[ -x /usr/bin/etcd ] || { xz -dc "$KIT/etcd.xz" > /usr/bin/etcd && chmod 755 /usr/bin/etcd; }
export PATH=/usr/lib/erlang/bin:$PATH SIEVEMQ_PEERS=$KIT SIEVEMQ_LOADGEN=$KIT/loadgen
[ -f "$KIT/COMMIT" ] && export SIEVEMQ_BENCH_COMMIT=$(cat "$KIT/COMMIT")  # the copy has no history
chmod +x "$KIT/loadgen" "$KIT/rabbitmq.sh"
PYTHONPATH=$PWD/src:$PWD "$SVPY" -m bench.cluster_scaling --peers --nodes "${NODES:-$(nproc)}" \
  --streams "${KS:-1,4,8,16}" --n "${N:-100000}" --repeats "${REPEATS:-3}" --via "${VIA:-leader}" \
  --loadgen-procs "${LOADGEN_PROCS:-2}" --cluster-size "${CLUSTER_SIZE:-1}" \
  ${NO_SINGLE:+--no-single} ${NO_RABBITMQ:+--no-rabbitmq} --raw "$OUT/runs.jsonl" > "$OUT/cluster_scaling.json"
status=$?
cat "$OUT/cluster_scaling.json"
exit $status

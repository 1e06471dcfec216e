#!/usr/bin/env bash
# RabbitMQ from Debian's rabbitmq-server package, for the benchmarks' side-by-side runs.
#
#   bench/rabbitmq.sh [--port P] [--stream-port P] [--dir DIR]
#   bench/rabbitmq.sh --install-only     (just the package: its rabbitmqadmin for the tests)
#
# Installs rabbitmq-server with apt-get when it is missing (it must be 3.9 or later: stream
# queues over AMQP 0-9-1; Debian 12 has 3.10.8), then runs ONE private node in the
# foreground: its own epmd and Erlang distribution on free loopback ports, AMQP on
# 127.0.0.1 (--port, default a free one), all state in a fresh temporary directory (--dir to
# choose it). /etc/rabbitmq and any system node are left alone: the node reads only the
# config written here, and Debian's /usr/sbin wrapper (which switches to the rabbitmq user)
# is bypassed for /usr/lib/rabbitmq/bin/rabbitmq-server, run as the calling user.
#
# Once the node is up it prints one line on stdout:
#   rabbitmq ready amqp=127.0.0.1:PORT pid=BEAM_PID version=3.10.8 dir=DIR
# then stays until SIGTERM or SIGINT, when it stops the node and its epmd (by pid) and
# removes the directory it created. No plugin is enabled unless --stream-port is given
# (then rabbitmq_stream listens there).
set -euo pipefail

PORT=0
STREAM_PORT=0
BASE=""
INSTALL_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --port) PORT=$2; shift 2 ;;
    --stream-port) STREAM_PORT=$2; shift 2 ;;
    --dir) BASE=$2; shift 2 ;;
    --install-only) INSTALL_ONLY=1; shift ;;
    *) echo "usage: $0 [--port P] [--stream-port P] [--dir DIR] | --install-only" >&2; exit 2 ;;
  esac
done

SBIN=/usr/lib/rabbitmq/bin
say() { echo "[rabbitmq.sh] $*" >&2; }

if [ ! -x "$SBIN/rabbitmq-server" ] || ! command -v epmd >/dev/null 2>&1; then
  say "installing Debian's rabbitmq-server"
  # keep the package from starting a system broker on 5672 while it installs
  guard=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    guard=1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends rabbitmq-server >/dev/null
  if [ "$guard" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
fi
VERSION=$(dpkg-query -W -f='${Version}' rabbitmq-server 2>/dev/null | sed 's/-.*//')
if ! dpkg --compare-versions "${VERSION:-0}" ge 3.9; then
  say "rabbitmq-server $VERSION has no stream queues (3.9 or later needed)"
  exit 1
fi
if [ "$INSTALL_ONLY" = 1 ]; then exit 0; fi

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
[ "$PORT" = 0 ] && PORT=$(free_port)
EPMD_PORT=$(free_port)
DIST_PORT=$(free_port)
OWN_DIR=0
if [ -z "$BASE" ]; then
  BASE=$(mktemp -d "${TMPDIR:-/tmp}/sievemq-rabbitmq-XXXXXX")
  OWN_DIR=1
fi
mkdir -p "$BASE/home" "$BASE/mnesia" "$BASE/log"
chmod 700 "$BASE/home"

export HOME="$BASE/home"  # the Erlang cookie
export RABBITMQ_NODENAME="bench$PORT@localhost"
export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT="$PORT" RABBITMQ_DIST_PORT="$DIST_PORT"
export RABBITMQ_CONF_ENV_FILE="$BASE/rabbitmq-env.conf"
export RABBITMQ_CONFIG_FILE="$BASE/rabbitmq.conf"
export RABBITMQ_ADVANCED_CONFIG_FILE="$BASE/advanced.config"
export RABBITMQ_ENABLED_PLUGINS_FILE="$BASE/enabled_plugins"
export RABBITMQ_MNESIA_BASE="$BASE/mnesia" RABBITMQ_LOG_BASE="$BASE/log"
export RABBITMQ_PID_FILE="$BASE/rabbitmq.pid"
export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
export RABBITMQ_CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
export ERL_EPMD_PORT="$EPMD_PORT" ERL_EPMD_ADDRESS=127.0.0.1
export LC_ALL=C.UTF-8 LANG=C.UTF-8

: > "$BASE/rabbitmq-env.conf"
echo '[].' > "$BASE/advanced.config"
{
  echo "listeners.tcp.1 = 127.0.0.1:$PORT"
  echo "loopback_users.guest = true"
  echo "log.console = false"
  echo "log.file.level = warning"
} > "$BASE/rabbitmq.conf"
if [ "$STREAM_PORT" != 0 ]; then
  echo "[rabbitmq_stream]." > "$BASE/enabled_plugins"
  {
    echo "stream.listeners.tcp.1 = 127.0.0.1:$STREAM_PORT"
    echo "stream.advertised_host = 127.0.0.1"
    echo "stream.advertised_port = $STREAM_PORT"
  } >> "$BASE/rabbitmq.conf"
else
  echo "[]." > "$BASE/enabled_plugins"
fi

EPMD_PID=""
SERVER_PID=""
cleanup() {
  trap - EXIT TERM INT
  if [ -f "$BASE/rabbitmq.pid" ] && kill -0 "$(cat "$BASE/rabbitmq.pid")" 2>/dev/null; then
    timeout 60 "$SBIN/rabbitmqctl" -q stop "$BASE/rabbitmq.pid" >/dev/null 2>&1 \
      || kill -KILL "$(cat "$BASE/rabbitmq.pid")" 2>/dev/null || true
  fi
  if [ -n "$SERVER_PID" ]; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  if [ -n "$EPMD_PID" ]; then
    kill -TERM "$EPMD_PID" 2>/dev/null || true
    wait "$EPMD_PID" 2>/dev/null || true
  fi
  if [ "$OWN_DIR" = 1 ]; then rm -rf "$BASE"; fi
}
trap cleanup EXIT
trap 'exit 0' TERM INT

epmd -address 127.0.0.1 -port "$EPMD_PORT" > "$BASE/log/epmd.out" 2>&1 &
EPMD_PID=$!
"$SBIN/rabbitmq-server" > "$BASE/log/server.out" 2>&1 < /dev/null &
SERVER_PID=$!
for _ in $(seq 600); do
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    say "the node exited during start-up:"; tail -30 "$BASE/log/server.out" >&2; exit 1
  fi
  if [ -s "$BASE/rabbitmq.pid" ] && "$SBIN/rabbitmqctl" -q await_startup --timeout 5 >/dev/null 2>&1; then
    break
  fi
  sleep 0.5
done
"$SBIN/rabbitmqctl" -q await_startup --timeout 10 >/dev/null
echo "rabbitmq ready amqp=127.0.0.1:$PORT pid=$(cat "$BASE/rabbitmq.pid") version=$VERSION dir=$BASE"
wait "$SERVER_PID"

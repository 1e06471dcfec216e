#!/usr/bin/env bash
# Build bench/loadgen/sievemq-loadgen offline from Debian packages (no Go module proxy):
# golang-go and golang-github-rabbitmq-amqp091-go-dev (the client's source, in
# /usr/share/gocode), installed with apt-get when missing. Usage: build.sh [OUTPUT]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-$HERE/sievemq-loadgen}
GOCODE=/usr/share/gocode
if ! command -v go >/dev/null || [ ! -d "$GOCODE/src/github.com/rabbitmq/amqp091-go" ]; then
  echo "[build.sh] installing golang-go and golang-github-rabbitmq-amqp091-go-dev" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    golang-go golang-github-rabbitmq-amqp091-go-dev >/dev/null
fi
# GOPATH mode against the Debian source tree: nothing is fetched
export GO111MODULE=off GOFLAGS= GOPROXY=off GOPATH="$GOCODE" GOCACHE="${TMPDIR:-/tmp}/sievemq-loadgen-gocache"
cd "$HERE"
go build -trimpath -o "$OUT" main.go
echo "[build.sh] built $OUT ($(go version | cut -d' ' -f3))" >&2

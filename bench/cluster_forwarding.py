"""What publish forwarding costs: server CPU per message publishing through the leader
against through the other node of a two-node cluster.

    python -m bench.cluster_forwarding [--n 100000] [--pairs 3] [--fanout K] [--profile FILE]

A real etcd and two real nodes (``a`` leads every stream, ``b`` forwards), ``--fsync
batch``. Each run is the project's load generator (``bench/loadgen``, amqp091-go: 100 B
bodies, confirms with a window of 1,000, ``-unique-props -filter-values 50``) publishing
``--n`` messages into a fresh stream declared on ``a``, connected either to ``a`` (the
leader: the single-node path) or to ``b`` (every message forwarded over the inter-node
link). One uncounted warm-up run each way first; then ``--pairs`` pairs, the order
alternating. The figure is the CPU (utime + stime from /proc/PID/stat) of BOTH node
processes together per published message, and the publish rate; the issue's aim is
forwarding at most 1.3x the leader's CPU per message.

``--fanout K`` (K >= 2) declares K streams on ``a`` per run and a fanout exchange bound to
them, and publishes to the exchange: each message is stored K times, on ``a``, and through
``b`` it goes to ``a`` once (raw forwarding of a route to several queues of one leader).

``--profile FILE`` runs both nodes under cProfile for one forwarded run and writes
``FILE.a`` and ``FILE.b`` (and prints the top functions of each by own time).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import pstats
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika

from bench import kit
from bench._util import git_commit, machine, proc_cpu_s
from sievemq.testing.etcd import EtcdProcess
from sievemq.testing.process import ready_fields

START_S = 120.0


class Node:
    """One ``sievemq serve`` cluster node (optionally under cProfile)."""

    def __init__(self, name: str, etcd: str, data: Path, profile: Path | None = None) -> None:
        cmd = [sys.executable]
        if profile is not None:
            cmd += ["-m", "cProfile", "-o", str(profile)]
        cmd += ["-m", "sievemq", "serve", "--node-name", name, "--cluster-etcd", etcd]
        for flag in ("--amqp-port", "--admin-port", "--stream-port", "--cluster-port"):
            cmd += [flag, "0"]
        cmd += ["--stream-tls-port", "0", "--fsync", "batch", "--data-dir", str(data / name)]
        self.name = name
        self.log = (data / f"{name}.log").open("w")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("sievemq ready"):
            raise RuntimeError(f"node {name} did not start: see {data / f'{name}.log'}")
        fields = ready_fields(line)
        self.port = int(fields["amqp"].rsplit(":", 1)[1])
        self.admin = fields["admin"]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@contextlib.contextmanager
def cluster(data: Path, profile: str | None = None) -> Iterator[tuple[Node, Node]]:
    etcd = EtcdProcess(data / "etcd", unsafe_no_fsync=True).start()
    nodes: list[Node] = []
    try:
        for name in ("a", "b"):
            nodes.append(Node(name, etcd.url, data, Path(f"{profile}.{name}") if profile else None))
        yield nodes[0], nodes[1]
    finally:
        for node in nodes:
            node.stop()
        etcd.stop()


def declare_on_a(a: Node, b: Node, name: str, fanout: int = 1) -> str:
    """Stream ``name`` on ``a`` (with ``fanout`` > 1: streams ``name-0``... and a fanout
    exchange ``name`` bound to them), once ``b`` knows it; the exchange to publish to."""
    names = [name] if fanout < 2 else [f"{name}-{i}" for i in range(fanout)]
    conn = pika.BlockingConnection(pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{a.port}/"))
    try:
        ch = conn.channel()
        for queue in names:
            ch.queue_declare(queue, durable=True, arguments={"x-queue-type": "stream"})
        if fanout > 1:
            ch.exchange_declare(name, "fanout", durable=True)
            for queue in names:
                ch.queue_bind(queue, name)
    finally:
        conn.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        queues = httpx.get(b.admin + "/api/queues", auth=("guest", "guest"), timeout=10).json()
        known = {q["name"] for q in queues if q.get("leader") == "a"}
        if known.issuperset(names):
            time.sleep(1.0 if fanout > 1 else 0)  # the bindings reach b within a second
            return name if fanout > 1 else ""
        time.sleep(0.1)
    raise RuntimeError(f"node b does not know stream {name}")


def publish(port: int, queue: str, n: int, pids: list[int], exchange: str = "") -> dict[str, float]:
    """One loadgen run into ``queue`` (or ``exchange``) through ``port``: rate and both
    nodes' CPU per message."""
    cpu0 = [proc_cpu_s(pid) for pid in pids]
    out = subprocess.run(
        [
            str(kit.loadgen()), "-port", str(port), "-mode", "publish", "-n", str(n),
            "-size", "100", "-window", "1000", "-unique-props", "-filter-values", "50",
            "-queue", queue, "-no-declare", "-keep", "-exchange", exchange,
        ],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    cpu = [proc_cpu_s(pid) - before for pid, before in zip(pids, cpu0, strict=True)]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if "error" in result:
        raise RuntimeError(f"loadgen: {result['error']}")
    published = max(1, int(result["published"]))
    return {
        "rate": float(result["pub_msgs_per_s"]),
        "cpu_us_per_msg": round(1e6 * sum(cpu) / published, 2),
        # each node's share: a (the leader), then b
        "node_cpu_us_per_msg": [round(1e6 * c / published, 2) for c in cpu],
    }


def measure(n: int, pairs: int, fanout: int = 1) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {"leader": [], "forwarded": []}
    with tempfile.TemporaryDirectory(prefix="sievemq-fwd-") as tmp, cluster(Path(tmp)) as (a, b):
        pids = [a.pid, b.pid]
        count = 0

        def run(way: str) -> dict[str, float]:
            nonlocal count
            count += 1
            queue = f"fwd-{count}"
            exchange = declare_on_a(a, b, queue, fanout)
            return publish(a.port if way == "leader" else b.port, queue, n, pids, exchange)

        run("leader")  # warm-up: imports, memo caches, the link's first connection
        run("forwarded")
        for i in range(pairs):
            order = ("leader", "forwarded") if i % 2 == 0 else ("forwarded", "leader")
            for way in order:
                runs[way].append(run(way))
    leader = statistics.median(r["cpu_us_per_msg"] for r in runs["leader"])
    forwarded = statistics.median(r["cpu_us_per_msg"] for r in runs["forwarded"])
    return {
        "benchmark": "cluster_forwarding",
        "commit": git_commit(),
        "machine": machine(),
        "n": n,
        "pairs": pairs,
        "fanout": fanout,
        "runs": runs,
        "leader_cpu_us_per_msg": round(leader, 2),
        "forwarded_cpu_us_per_msg": round(forwarded, 2),
        "ratio": round(forwarded / leader, 3),
        "leader_rate": statistics.median(r["rate"] for r in runs["leader"]),
        "forwarded_rate": statistics.median(r["rate"] for r in runs["forwarded"]),
    }


def profile(n: int, out: str) -> None:
    with tempfile.TemporaryDirectory(prefix="sievemq-fwd-") as tmp:
        with cluster(Path(tmp), out) as (a, b):
            declare_on_a(a, b, "fwd-warm")
            publish(b.port, "fwd-warm", min(n, 20_000), [a.pid, b.pid])
            declare_on_a(a, b, "fwd-profiled")
            print(json.dumps(publish(b.port, "fwd-profiled", n, [a.pid, b.pid])))
        for name in ("a", "b"):
            print(f"--- node {name} (own time)")
            pstats.Stats(f"{out}.{name}").sort_stats("tottime").print_stats(25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--fanout", type=int, default=1)
    parser.add_argument("--profile", default=None)
    args = parser.parse_args()
    if args.profile:
        profile(args.n, args.profile)
        return
    print(json.dumps(measure(args.n, args.pairs, args.fanout), indent=1))


if __name__ == "__main__":
    main()

"""What consuming through a node that does not lead the queue costs: server CPU per message,
all nodes together, through the leader ``a`` against through the other node ``b``.

An etcd and two real nodes on loopback. Per round and path, interleaved (a, b, b, a, ...) so
the machine's load hits both alike:

* classic: N persistent messages published to a durable classic queue through ``a`` (Go
  loadgen, confirms, window 1000), then consumed with manual acks (prefetch 1000, ack
  multiple every 500) through the path's node; the CPU of both node processes (utime + stime
  from /proc) over the consume phase, divided by the messages;
* stream: one stream of N messages (published once through ``a``), read from the first
  offset through the path's node the same way.

Prints one JSON document: the medians per path and kind, every round, and the ratio b/a (the
issue's aim: at most 1.3).

    python -m bench.cluster_consume_cpu [--n 50000] [--size 100] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pika

from bench import kit
from bench._util import git_commit, machine, proc_cpu_s
from bench.classic_work_queue import consume_args, publish
from sievemq.testing import ServerProcess
from sievemq.testing.etcd import running_etcd


def _node(base: Path, name: str, etcd_url: str) -> ServerProcess:
    return ServerProcess(
        base / name,
        (
            "--node-name",
            name,
            "--cluster-etcd",
            etcd_url,
            "--cluster-port",
            "0",
            "--fsync",
            "batch",
        ),
    ).start()


def _declare(node: ServerProcess, queue: str, kind: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(node.url))
    ch = conn.channel()
    ch.queue_delete(queue)
    ch.queue_declare(queue, durable=True, arguments={"x-queue-type": kind})
    conn.close()


def _known(node: ServerProcess, queue: str) -> bool:
    answer = httpx.get(f"{node.admin_url}/api/queues", auth=("guest", "guest"), timeout=10)
    return any(q["name"] == queue for q in answer.json())


def _wait_known(node: ServerProcess, queue: str) -> None:
    deadline = time.monotonic() + 30
    while not _known(node, queue):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{queue} never reached the other node")
        time.sleep(0.1)


def _consume(
    via: ServerProcess, nodes: list[ServerProcess], queue: str, n: int, offset: str
) -> dict[str, Any]:
    """One loadgen consume of ``n`` through ``via``; the CPU of every node over it."""
    args = consume_args(via.amqp_port, queue, n)
    args[args.index("-offset") + 1] = offset
    before = [proc_cpu_s(node.pid) for node in nodes]
    out = subprocess.run(args, capture_output=True, text=True, timeout=600)
    cpu = [proc_cpu_s(node.pid) - b for node, b in zip(nodes, before, strict=True)]
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    consumed = max(int(result.get("consumed") or 0), 1)
    return {
        "consumed": consumed,
        "cons_msgs_per_s": result.get("cons_msgs_per_s"),
        "server_cpu_us_per_msg": round(sum(cpu) / consumed * 1e6, 2),
        "per_node_cpu_us_per_msg": [round(c / consumed * 1e6, 2) for c in cpu],
        "load_average": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    kit.loadgen()
    runs: dict[str, list[dict[str, Any]]] = {
        f"{kind}_via_{via}": [] for kind in ("classic", "stream") for via in ("a", "b")
    }
    with tempfile.TemporaryDirectory(prefix="sievemq-cluster-cpu-") as tmp:
        base = Path(tmp)
        with running_etcd(base / "etcd") as etcd:
            a = _node(base, "a", etcd.url)
            b = _node(base, "b", etcd.url)
            nodes = [a, b]
            try:
                _declare(a, "bench-stream", "stream")
                publish(a.amqp_port, a.pid, "bench-stream", args.n, args.size)
                _wait_known(b, "bench-stream")
                for i in range(args.rounds):
                    order = ("a", "b") if i % 2 == 0 else ("b", "a")
                    for via in order:
                        node = a if via == "a" else b
                        _declare(a, "bench-classic", "classic")
                        _wait_known(b, "bench-classic")
                        publish(a.amqp_port, a.pid, "bench-classic", args.n, args.size)
                        time.sleep(0.3)
                        got = _consume(node, nodes, "bench-classic", args.n, "")
                        runs[f"classic_via_{via}"].append(got)
                        print(f"classic via {via}", json.dumps(got), file=sys.stderr, flush=True)
                        got = _consume(node, nodes, "bench-stream", args.n, "first")
                        runs[f"stream_via_{via}"].append(got)
                        print(f"stream via {via}", json.dumps(got), file=sys.stderr, flush=True)
            finally:
                for node in nodes:
                    node.stop()
    medians = {
        name: statistics.median(r["server_cpu_us_per_msg"] for r in rounds)
        for name, rounds in runs.items()
    }
    print(
        json.dumps(
            {
                "bench": "cluster_consume_cpu",
                "head": git_commit(),
                "n": args.n,
                "size": args.size,
                "machine": machine(),
                "median_server_cpu_us_per_msg": medians,
                "ratio_b_over_a": {
                    kind: round(medians[f"{kind}_via_b"] / medians[f"{kind}_via_a"], 3)
                    for kind in ("classic", "stream")
                },
                "runs": runs,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()

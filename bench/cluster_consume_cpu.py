"""What consuming through a node that does not lead the queue costs: server CPU per message,
all nodes together, through the leader ``a`` against through the other node ``b``.

An etcd and two real nodes on loopback. Per round and path, interleaved (a, b, b, a, ...) so
the machine's load hits both alike:

* classic: N persistent messages published to a durable classic queue through ``a`` (Go
  loadgen, confirms, window 1000), then consumed with manual acks (prefetch 1000, ack
  multiple every 500) through the path's node; the CPU of both node processes (utime + stime
  from /proc) over the consume phase, divided by the messages;
* stream: one stream of N messages (published once through ``a``, no replica:
  ``x-initial-cluster-size`` 1), read from the first offset through the path's node the same
  way (through ``b``: relayed over the link from ``a``);
* replica: the same with a replica on ``b`` (``x-initial-cluster-size`` 2): through ``b`` a
  consumer reads ``b``'s copy; through ``a``, the leader's stream.

Prints one JSON document: the medians per path and kind, every round, and the ratio b/a (the
issue's aim: at most 1.3).

    python -m bench.cluster_consume_cpu [--n 50000] [--size 100] [--rounds 3]
        [--kinds classic,stream,replica]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import httpx
import pika

from bench import kit
from bench._cluster import running_cluster
from bench._util import git_commit, machine, proc_cpu_s
from bench.classic_work_queue import consume_args, publish
from sievemq.spark.stream_client import StreamClient, StreamURI
from sievemq.testing import ServerProcess


def _declare(node: ServerProcess, queue: str, kind: str, copies: int | None = None) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(node.url))
    ch = conn.channel()
    ch.queue_delete(queue)
    arguments: dict[str, Any] = {"x-queue-type": kind}
    if copies is not None:
        arguments["x-initial-cluster-size"] = copies
    ch.queue_declare(queue, durable=True, arguments=arguments)
    conn.close()


def _copied(node: ServerProcess, queue: str, n: int) -> bool:
    """``node``'s replica of stream ``queue`` holds ``n`` messages (its StreamStats)."""
    uri = StreamURI.parse(f"rabbitmq-stream://guest:guest@{node.host}:{node.stream_port}/%2F")
    with StreamClient(uri) as client:
        return int(client.stream_stats(queue).end) >= n


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
    parser.add_argument("--kinds", default="classic,stream,replica")
    args = parser.parse_args()
    kinds = [k for k in ("classic", "stream", "replica") if k in args.kinds.split(",")]
    kit.loadgen()
    runs: dict[str, list[dict[str, Any]]] = {
        f"{kind}_via_{via}": [] for kind in kinds for via in ("a", "b")
    }
    streams = {"stream": ("bench-stream", 1), "replica": ("bench-replicated", 2)}
    with running_cluster("sievemq-cluster-cpu-", ("a", "b"), ("--fsync", "batch")) as cluster:
        a, b = cluster["a"], cluster["b"]
        nodes = [a, b]
        for kind, (name, copies) in streams.items():
            if kind in kinds:
                _declare(a, name, "stream", copies)
                publish(a.amqp_port, a.pid, name, args.n, args.size)
                _wait_known(b, name)
        if "replica" in kinds:
            deadline = time.monotonic() + 120
            while not _copied(b, streams["replica"][0], args.n):
                if time.monotonic() > deadline:
                    raise RuntimeError("b's replica did not catch up")
                time.sleep(0.2)
        for i in range(args.rounds):
            order = ("a", "b") if i % 2 == 0 else ("b", "a")
            for via in order:
                node = a if via == "a" else b
                if "classic" in kinds:
                    _declare(a, "bench-classic", "classic")
                    _wait_known(b, "bench-classic")
                    publish(a.amqp_port, a.pid, "bench-classic", args.n, args.size)
                    time.sleep(0.3)
                    got = _consume(node, nodes, "bench-classic", args.n, "")
                    runs[f"classic_via_{via}"].append(got)
                    print(f"classic via {via}", json.dumps(got), file=sys.stderr)
                for kind, (name, _) in streams.items():
                    if kind in kinds:
                        got = _consume(node, nodes, name, args.n, "first")
                        runs[f"{kind}_via_{via}"].append(got)
                        print(f"{kind} via {via}", json.dumps(got), file=sys.stderr)
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
                    for kind in kinds
                },
                "runs": runs,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()

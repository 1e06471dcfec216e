"""K streams over N cluster nodes beside one node and RabbitMQ 3.10.8: aggregate rates and
server CPU per message; one JSON document on stdout.

    python -m bench.cluster_scaling [--nodes N] [--streams 1,2,4] [--n 200000] [--repeats 3]
                                    [--via leader|other|both] [--no-single] [--no-rabbitmq]
                                    [--fsync batch] [--loadgen-procs 1] [--peers] [--raw FILE]
                                    [--cluster-size S]

Starts an etcd (Debian's, ``sievemq.cluster.local.EtcdProcess``) and ``--nodes`` nodes
(default: one per core) on free loopback ports, a single ``sievemq serve`` without a cluster,
and a private RabbitMQ (``bench/kit.py``; ``--peers``: ``../shared/peers``), all at once.
For each K of ``--streams`` (default: 1 and powers of two up to the node count), each run:
K fresh streams, stream *i* declared on node *i mod N* (its leader); one Go load generator
(``bench/loadgen``, amqp091-go) per stream at once, publishing ``--n`` messages with
confirms (100 B, ``-unique-props``, 50 filter values), then one per stream consuming them all
from the first offset; the streams are deleted after the run. ``--cluster-size`` sets the
cluster's ``x-initial-cluster-size`` (the server's default is 3: every message is then also
written by two replicas; 1 compares like with like against one RabbitMQ node). The systems
take turns in every repeat, so machine noise hits all alike.

Measured per run: the aggregate rate (every client's confirmed or consumed messages over
the wall time from the first load generator's start to the last one's exit), the server CPU
(utime + stime of every node, ``/proc/PID/stat``) per message and the server cores used.
Reported: the median of ``--repeats`` runs, and the cluster's figures over one node's and
over RabbitMQ's.

``--via other`` connects each stream's load generators to a node that is not its leader
(node *i+1 mod N*): publishes then go through the inter-node link, and consumes too unless
that node holds a replica of the stream (``x-initial-cluster-size``, default 3: with at most
three nodes every node does), whose copy it then reads (docs/cluster.md); a node without
forwarding refuses them: the run reports the load generator's error. ``--via both``
measures the two beside each other and reports what forwarding costs (server CPU per message,
all nodes, through another node over through the leader).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pika

from bench import kit
from bench._util import git_commit, machine, proc_cpu_s
from sievemq.cluster.local import EtcdProcess
from sievemq.testing import ServerProcess

UNIQUE = ["-unique-props", "-filter-values", "50"]
SIZE = 100


@dataclass
class System:
    """A broker under test: its AMQP ports (one per node) and its server processes."""

    name: str
    ports: list[int]
    pids: list[int]
    admin_urls: list[str] = field(default_factory=list)  # SieveMQ's, one per node
    stream_arguments: dict[str, Any] = field(default_factory=dict)  # beside x-queue-type
    runs: list[dict[str, Any]] = field(default_factory=list)

    def cpu_s(self) -> float:
        return sum(proc_cpu_s(pid) for pid in self.pids)

    def port_for(self, stream: int, via: str) -> int:
        """The node a stream's clients connect to: its leader, or the next node."""
        leader = stream % len(self.ports)
        return self.ports[leader if via == "leader" else (leader + 1) % len(self.ports)]


def declare(port: int, queue: str, extra: dict[str, Any]) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        arguments = {"x-queue-type": "stream", **extra}
        conn.channel().queue_declare(queue, durable=True, arguments=arguments)
    finally:
        conn.close()


def delete(port: int, queue: str) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        conn.channel().queue_delete(queue)
    finally:
        conn.close()


def stored_messages(system: System, stream: int, queue: str) -> int:
    """The messages a SieveMQ stream holds, as its leader's admin API says (0 for RabbitMQ)."""
    if not system.admin_urls:
        return 0
    url = system.admin_urls[stream % len(system.admin_urls)]
    answer = httpx.get(f"{url}/api/queues/%2F/{queue}", auth=("guest", "guest"), timeout=30)
    answer.raise_for_status()
    return int(answer.json().get("messages") or 0)


def load_phase(
    system: System, queues: list[tuple[str, int]], phase: str, n: int, procs: int
) -> dict[str, Any]:
    """One load generator per (queue, port) at once; aggregate rate and server CPU."""
    if phase == "publish":
        args = ["-mode", "publish", "-n", n, "-size", SIZE, "-window", 1000, *UNIQUE]
    else:
        args = ["-mode", "consume", "-m", n, "-prefetch", 1000, "-offset", "first"]
    fixed = ["-no-declare", "-keep", "-procs", str(procs)]
    cpu0, t0 = system.cpu_s(), time.perf_counter()
    clients = [
        subprocess.Popen(
            [str(kit.loadgen()), "-port", str(port), "-queue", queue, *fixed, *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for queue, port in queues
    ]
    outputs = [client.communicate(timeout=1800) for client in clients]
    wall = time.perf_counter() - t0
    cpu = system.cpu_s() - cpu0
    done, errors = 0, []
    for out, err in outputs:
        lines = out.strip().splitlines()
        result: dict[str, Any] = json.loads(lines[-1]) if lines else {"error": err.strip()}
        # this kit's loadgen says "published" (all confirmed), ../shared/peers' "confirmed"
        keys = ("confirmed", "published") if phase == "publish" else ("consumed",)
        done += next((int(result[key]) for key in keys if result.get(key)), 0)
        if result.get("error"):
            errors.append(str(result["error"])[:300])
    return {
        "msgs": done,
        "wall_s": round(wall, 3),
        "agg_msgs_per_s": round(done / wall) if wall else 0,
        "server_cpu_s": round(cpu, 3),
        "server_cores_used": round(cpu / wall, 2) if wall else 0,
        "server_cpu_us_per_msg": round(cpu * 1e6 / done, 2) if done else None,
        **({"errors": errors} if errors else {}),
    }


def one_run(system: System, k: int, n: int, via: str, procs: int, tag: str) -> dict[str, Any]:
    """K fresh streams on their leaders; publish to all at once, then consume all at once."""
    names = [f"scale-{tag}-{i}" for i in range(k)]
    for i, queue in enumerate(names):
        declare(system.port_for(i, "leader"), queue, system.stream_arguments)
    targets = [(queue, system.port_for(i, via)) for i, queue in enumerate(names)]
    run = {"system": system.name, "streams": k, "via": via}
    run["publish"] = load_phase(system, targets, "publish", n, procs)
    stored = sum(stored_messages(system, i, queue) for i, queue in enumerate(names))
    if system.admin_urls and stored < run["publish"]["msgs"]:
        # a node that cannot forward confirms what it could not route (no mandatory flag)
        lost = f"only {stored} of {run['publish']['msgs']} confirmed messages are stored"
        run["publish"].setdefault("errors", []).append(lost)
        run["publish"]["msgs_stored"] = stored
    run["consume"] = load_phase(system, targets, "consume", n, procs)
    for i, queue in enumerate(names):
        delete(system.port_for(i, "leader"), queue)
    system.runs.append(run)
    return run


def _median(runs: list[dict[str, Any]], phase: str, key: str) -> float | None:
    values = [r[phase][key] for r in runs if isinstance(r[phase].get(key), int | float)]
    return round(statistics.median(values), 2) if values else None


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": len(runs)}
    for phase in ("publish", "consume"):
        out[phase] = {
            key: _median(runs, phase, key)
            for key in ("agg_msgs_per_s", "server_cpu_us_per_msg", "server_cores_used")
        }
        errors = [e for r in runs for e in r[phase].get("errors", [])]
        if errors:
            out[phase]["errors"] = errors[:3]
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


# ---------------------------------------------------------------- the systems


@contextmanager
def cluster(base: Path, nodes: int, fsync: str) -> Iterator[System]:
    etcd = EtcdProcess(base / "etcd").start()
    more = ("--cluster-port", "0", "--fsync", fsync)
    procs = [
        ServerProcess(
            base / f"node{i + 1}",
            ("--node-name", f"node{i + 1}", "--cluster-etcd", etcd.url, *more),
        )
        for i in range(nodes)
    ]
    try:
        with ThreadPoolExecutor(nodes) as starting:  # each start is seconds of one core
            list(starting.map(ServerProcess.start, procs))
        yield System(
            f"cluster-{nodes}",
            [p.amqp_port for p in procs],
            [p.pid for p in procs],
            [p.admin_url for p in procs],
        )
    finally:
        for proc in procs:
            if proc.running:
                proc.stop()
        etcd.stop()


@contextmanager
def single(base: Path, fsync: str) -> Iterator[System]:
    proc = ServerProcess(base / "single", ("--fsync", fsync)).start()
    try:
        yield System("single", [proc.amqp_port], [proc.pid], [proc.admin_url])
    finally:
        proc.stop()


@contextmanager
def rabbitmq() -> Iterator[System]:
    with kit.rabbitmq_server() as (port, pid):
        yield System("rabbitmq", [port], [pid])


def rabbitmq_available() -> bool:
    if kit.using_peers():
        return (kit.PEERS / "rabbitmq.sh").exists()
    return Path("/usr/lib/rabbitmq/bin/rabbitmq-server").exists() or bool(
        shutil.which("rabbitmq-server")
    )


def default_streams(nodes: int) -> list[int]:
    ks, k = [1], 2
    while k <= nodes:
        ks.append(k)
        k *= 2
    return sorted({*ks, nodes})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--streams", help="comma-separated K values (default 1, 2, 4... N)")
    parser.add_argument("--n", type=int, default=200_000, help="messages per stream")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--via", choices=("leader", "other", "both"), default="leader")
    parser.add_argument("--fsync", default="batch")
    parser.add_argument("--loadgen-procs", type=int, default=1, help="GOMAXPROCS of each")
    parser.add_argument(
        "--cluster-size",
        type=int,
        help="the cluster's x-initial-cluster-size (default: the server's, 3; 1 compares like "
        "with like against one RabbitMQ node, which replicates nothing)",
    )
    parser.add_argument("--no-single", action="store_true")
    parser.add_argument("--no-rabbitmq", action="store_true")
    parser.add_argument("--peers", action="store_true", help="../shared/peers' kit")
    parser.add_argument("--raw", help="also write every run as a JSON line to this file")
    args = parser.parse_args()
    kit.use_peers(args.peers)
    ks = [int(k) for k in args.streams.split(",")] if args.streams else default_streams(args.nodes)
    vias = ["leader", "other"] if args.via == "both" else [args.via]
    base = Path(tempfile.mkdtemp(prefix="sievemq-cluster-bench-"))
    notes: list[str] = []
    try:
        with ExitStack() as stack:
            systems = [stack.enter_context(cluster(base, args.nodes, args.fsync))]
            if args.cluster_size is not None:
                systems[0].stream_arguments = {"x-initial-cluster-size": args.cluster_size}
            if not args.no_single:
                systems.append(stack.enter_context(single(base, args.fsync)))
            if args.no_rabbitmq:
                pass
            elif rabbitmq_available():
                systems.append(stack.enter_context(rabbitmq()))
            else:
                notes.append("RabbitMQ not installed here: measured without it")
            raw = open(args.raw, "a") if args.raw else None  # noqa: SIM115
            for k in ks:
                for rep in range(args.repeats):
                    for system in systems:
                        for via in vias if system.name.startswith("cluster") else ["leader"]:
                            tag = f"{system.name}-{via}-{k}-{rep}-{time.time_ns()}"
                            run = one_run(system, k, args.n, via, args.loadgen_procs, tag)
                            if raw is not None:
                                raw.write(json.dumps(run) + "\n")
                                raw.flush()
            if raw is not None:
                raw.close()
            results = report(systems, ks, vias)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(
        json.dumps(
            {
                "bench": "cluster_scaling",
                "machine": machine(),
                "commit": git_commit(),
                "nodes": args.nodes,
                "cluster_size": args.cluster_size or "default (3)",
                "messages_per_stream": args.n,
                "message": f"{SIZE} B, unique properties, 50 filter values, publish confirms",
                "repeats": args.repeats,
                "fsync": args.fsync,
                "notes": notes,
                "results": results,
            },
            indent=1,
        )
    )


def report(systems: list[System], ks: list[int], vias: list[str]) -> list[dict[str, Any]]:
    """Medians per (system, K, via), and the cluster beside one node and RabbitMQ."""
    out: list[dict[str, Any]] = []
    for k in ks:
        row: dict[str, Any] = {"streams": k}
        for system in systems:
            for via in vias if system.name.startswith("cluster") else ["leader"]:
                runs = [r for r in system.runs if r["streams"] == k and r["via"] == via]
                label = system.name if via == "leader" else f"{system.name}-via-other"
                row[label] = summary(runs)
        clustered = row.get(systems[0].name, {})
        for other in ("single", "rabbitmq"):
            if other in row:
                row[f"cluster_over_{other}"] = {
                    phase: ratio(
                        clustered[phase]["agg_msgs_per_s"], row[other][phase]["agg_msgs_per_s"]
                    )
                    for phase in ("publish", "consume")
                }
        forwarded = row.get(f"{systems[0].name}-via-other")
        if forwarded:  # a phase that failed through the other node has no ratio
            row["forwarding_cpu_per_msg_ratio"] = {
                phase: None
                if "errors" in forwarded[phase]
                else ratio(
                    forwarded[phase]["server_cpu_us_per_msg"],
                    clustered[phase]["server_cpu_us_per_msg"],
                )
                for phase in ("publish", "consume")
            }
        out.append(row)
    return out


if __name__ == "__main__":
    main()

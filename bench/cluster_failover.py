"""Stream failover time: a leader SIGKILLed, to the first confirm through another node.

A real etcd and three real nodes (a, b, c) on this machine, with the default lease TTL (5 s;
``--ttl`` to change it). Per round (the nodes take turns at being killed): a stream declared
with ``x-initial-cluster-size`` 3 on the node to kill, N confirmed messages published to it
(aiormq), the replicas' copies equal to the leader's; then the leader is SIGKILLed while a
pika client of another node publishes one message at a time with confirms (a nack or a
dropped channel: again at once). Reported per round: from the SIGKILL to the first confirm
through the other node (``failover_s``), to the record naming the new leader as that node's
``/api/queues`` shows it (``elected_s``), and, once the killed node is restarted, from its
ready line to its copy equal to the new leader's (``rejoined_s``).

    python -m bench.cluster_failover [--rounds 3] [--n 2000] [--ttl 5] [--out FILE.json]
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

import aiormq
import httpx
import pika
from pika.exceptions import AMQPError, NackError, UnroutableError

from bench._cluster import bench_options, caught_up, running_cluster, wait_for
from bench._util import git_commit, machine
from sievemq.testing import ServerProcess

NAMES = ("a", "b", "c")


async def _publish(node: ServerProcess, name: str, n: int) -> None:
    connection = await aiormq.connect(node.url)
    try:
        ch = await connection.channel(publisher_confirms=True)
        for start in range(0, n, 500):
            confirms = [
                ch.basic_publish(b"x" * 100, routing_key=name)
                for _ in range(start, min(start + 500, n))
            ]
            for confirm in await asyncio.gather(*confirms):
                assert isinstance(confirm, aiormq.spec.Basic.Ack)
    finally:
        await connection.close()


def _leader(node: ServerProcess, name: str) -> str | None:
    try:
        answer = httpx.get(node.admin_url + "/api/queues", auth=("guest", "guest"), timeout=5)
        rows = {q["name"]: q for q in answer.json()}
    except (httpx.HTTPError, ValueError):
        return None
    return rows.get(name, {}).get("leader")


def _first_confirm(node: ServerProcess, name: str, timeout: float) -> float:
    """Publish one message through ``node`` with a confirm until one is acked."""
    deadline = time.monotonic() + timeout
    conn = pika.BlockingConnection(pika.URLParameters(node.url))
    ch = conn.channel()
    ch.confirm_delivery()
    try:
        while time.monotonic() < deadline:
            try:
                ch.basic_publish("", name, b"after", mandatory=True)
                return time.monotonic()
            except (NackError, UnroutableError):
                continue
            except AMQPError:
                if conn.is_open:
                    conn.close()
                conn = pika.BlockingConnection(pika.URLParameters(node.url))
                ch = conn.channel()
                ch.confirm_delivery()
    finally:
        if conn.is_open:
            conn.close()
    raise TimeoutError(f"no confirm through {node.url} within {timeout} s")


def _round(nodes: dict[str, ServerProcess], r: int, n: int) -> dict[str, Any]:
    """Kill the leader of a new stream (the nodes take turns), time the failover."""
    victim = nodes[NAMES[r % 3]]
    other = nodes[NAMES[(r + 1) % 3]]
    name = f"failover-{r}"
    conn = pika.BlockingConnection(pika.URLParameters(victim.url))
    conn.channel().queue_declare(
        name, durable=True, arguments={"x-queue-type": "stream", "x-initial-cluster-size": 3}
    )
    conn.close()
    asyncio.run(_publish(victim, name, n))
    for replica in nodes.values():
        if replica is not victim:
            wait_for(lambda rep=replica: caught_up(victim, rep, name), "replicas", 120.0)
    victim.kill()
    killed = time.monotonic()
    acked = _first_confirm(other, name, 120.0)
    wait_for(lambda: _leader(other, name) not in (None, victim.data_dir.name), "record", 120.0)
    elected = time.monotonic()
    leader = nodes[str(_leader(other, name))]
    victim.start()
    ready = time.monotonic()
    wait_for(lambda: caught_up(leader, victim, name), "the old leader rejoins as replica", 120.0)
    return {
        "round": r,
        "killed": victim.data_dir.name,
        "new_leader": leader.data_dir.name,
        "failover_s": round(acked - killed, 3),
        "elected_s_at_most": round(elected - killed, 3),
        "rejoined_s": round(time.monotonic() - ready, 3),
    }


def run(rounds: int, n: int, ttl: int) -> dict[str, Any]:
    out: list[dict[str, Any]] = []
    flags = ("--cluster-lease-ttl", str(ttl))
    with running_cluster("sievemq-failover-", NAMES, flags) as nodes:
        for r in range(rounds):
            row = _round(nodes, r, n)
            print(json.dumps(row), flush=True)
            out.append(row)
    figures = [row["failover_s"] for row in out]
    return {
        "bench": "cluster_failover",
        "commit": git_commit(),
        "machine": machine(),
        "lease_ttl_s": ttl,
        "messages_before": n,
        "rounds": out,
        "failover_s_median": statistics.median(figures),
        "failover_s_max": max(figures),
    }


def main() -> None:
    parser = bench_options(__doc__, 2000)
    parser.add_argument("--ttl", type=int, default=5)
    args = parser.parse_args()
    result = run(args.rounds, args.n, args.ttl)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()

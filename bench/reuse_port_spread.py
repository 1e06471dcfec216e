"""How evenly the kernel spreads connections over nodes sharing a port (SO_REUSEPORT).

`python -m bench.reuse_port_spread [--nodes 2 4] [--connections 400] [--rounds 3]`: an etcd
and N `sievemq serve --reuse-port` nodes on loopback sharing one AMQP port; each round opens
``--connections`` AMQP connections (aiormq) to that port, counts them on every node from its
own ``/api/connections`` (each node keeps its own admin port here) and closes them. Prints one
JSON object: per round the count per node, and the spread (largest and smallest share against
the even share, and the coefficient of variation).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiormq
import httpx

from bench._util import git_commit
from sievemq.cluster.local import free_port
from sievemq.testing import ServerProcess
from sievemq.testing.etcd import running_etcd


async def _open(url: str, count: int) -> list[aiormq.abc.AbstractConnection]:
    """``count`` connections, 50 handshakes at a time."""
    out: list[aiormq.abc.AbstractConnection] = []
    for start in range(0, count, 50):
        batch = [aiormq.connect(url) for _ in range(min(50, count - start))]
        out += await asyncio.gather(*batch)
    return out


def _count(node: ServerProcess) -> int:
    """The connections the node holds itself (its list names every node's)."""
    auth = ("guest", "guest")
    me = httpx.get(node.admin_url + "/api/overview", auth=auth, timeout=60).json()["node"]
    r = httpx.get(node.admin_url + "/api/connections", auth=auth, timeout=60)
    r.raise_for_status()
    return sum(1 for conn in r.json() if conn.get("node") == me)


async def _round(url: str, nodes: list[ServerProcess], count: int) -> list[int]:
    conns = await _open(url, count)
    try:
        return [await asyncio.to_thread(_count, n) for n in nodes]
    finally:
        await asyncio.gather(*(c.close() for c in conns))


def _spread(counts: list[int]) -> dict[str, Any]:
    even = sum(counts) / len(counts)
    return {
        "per_node": counts,
        "max_over_even": round(max(counts) / even, 3),
        "min_over_even": round(min(counts) / even, 3),
        "cv": round(statistics.pstdev(counts) / even, 3),
    }


def measure(n: int, connections: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, running_etcd(Path(tmp) / "etcd") as etcd:
        port = free_port()
        nodes = []
        try:
            for i in range(n):
                args = ("--node-name", f"r{i + 1}", "--cluster-etcd", etcd.url)
                args += ("--cluster-port", "0", "--reuse-port", "--amqp-port", str(port))
                nodes.append(ServerProcess(Path(tmp) / f"r{i + 1}", args).start())
            url = f"amqp://guest:guest@127.0.0.1:{port}/"
            results = [_spread(asyncio.run(_round(url, nodes, connections))) for _ in range(rounds)]
        finally:
            for node in nodes:
                node.stop()
    return {"nodes": n, "connections": connections, "rounds": results}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--connections", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    out = {
        "commit": git_commit(),
        "runs": [measure(n, args.connections, args.rounds) for n in args.nodes],
    }
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What stream replication costs the leader, and how fast a returning replica catches up.

A real etcd and three real nodes (a, b, c) on this machine. Per round, interleaved: a stream
declared on a with ``x-initial-cluster-size`` 1 (no replica) and one with 3 (replicas on b
and c); N messages of 100 B with one of 50 filter values published to a with confirms
(aiormq, pipelined in windows of 1000). Reported per case: the leader's publish rate (the
last confirm), the leader's CPU per message over the publish, and the CPU of all three
nodes per message until every replica's files equal the leader's. Then the catch-up: c is
SIGKILLed, N x 10 messages go to a replicated stream, c restarts, and the time from its
ready line to its copy equal to the leader's gives the catch-up rate (its follower starts at
the join, just before the ready line: the time from the restart is reported too).

    python -m bench.stream_replication [--n 50000] [--rounds 3] [--out FILE.json]

The load generator runs on the same cores as the nodes (this is a 2-core machine): the
rates are the machine's, the CPU per message is the servers' own (utime + stime, /proc).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiormq
import httpx

from bench._util import git_commit, machine, proc_cpu_s
from sievemq.cluster.replication import replica_directory
from sievemq.storage.layout import stream_directory
from sievemq.testing import ServerProcess
from sievemq.testing.etcd import running_etcd

WINDOW = 1000
FILTERS = 50


def _args(etcd_url: str, name: str) -> tuple[str, ...]:
    return ("--node-name", name, "--cluster-etcd", etcd_url, "--cluster-port", "0")


@contextmanager
def three_nodes(prefix: str) -> Iterator[dict[str, ServerProcess]]:
    """An etcd and nodes a, b, c in a temporary folder, started for the block."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        base = Path(tmp)
        with running_etcd(base / "etcd") as etcd:
            nodes = {n: ServerProcess(base / n, _args(etcd.url, n)) for n in ("a", "b", "c")}
            try:
                for proc in nodes.values():
                    proc.start()
                yield nodes
            finally:
                for proc in nodes.values():
                    if proc.running:
                        proc.stop()


def _sizes(directory: Path) -> dict[str, int]:
    if not directory.is_dir():
        return {}
    return {p.name: p.stat().st_size for p in directory.glob("*.segment")}


def _caught_up(leader: ServerProcess, replica: ServerProcess, name: str) -> bool:
    mine = _sizes(replica_directory(replica.data_dir, "/", name))
    return bool(mine) and mine == _sizes(stream_directory(leader.data_dir, "/", name))


def _wait(check: Any, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("replicas did not catch up")
        time.sleep(0.02)


async def _publish(node: ServerProcess, name: str, n: int) -> None:
    connection = await aiormq.connect(node.url)
    try:
        ch = await connection.channel(publisher_confirms=True)
        body = b"x" * 100
        for start in range(0, n, WINDOW):
            confirms = [
                asyncio.ensure_future(
                    ch.basic_publish(
                        body,
                        routing_key=name,
                        properties=aiormq.spec.Basic.Properties(
                            headers={"x-stream-filter-value": f"f{i % FILTERS}"}
                        ),
                    )
                )
                for i in range(start, min(start + WINDOW, n))
            ]
            await asyncio.gather(*confirms)
    finally:
        await connection.close()


async def _declare(node: ServerProcess, name: str, size: int) -> None:
    connection = await aiormq.connect(node.url)
    try:
        ch = await connection.channel()
        arguments = {"x-queue-type": "stream", "x-initial-cluster-size": size}
        await ch.queue_declare(name, durable=True, arguments=arguments)
    finally:
        await connection.close()


def _members_online(node: ServerProcess, name: str, count: int) -> bool:
    rows = httpx.get(node.admin_url + "/api/queues", auth=("guest", "guest"), timeout=10).json()
    return any(q["name"] == name and len(q.get("online", [])) == count for q in rows)


def _case(nodes: dict[str, ServerProcess], name: str, size: int, n: int) -> dict[str, float]:
    a = nodes["a"]
    asyncio.run(_declare(a, name, size))
    _wait(lambda: _members_online(a, name, size))
    cpu0 = {k: proc_cpu_s(p.pid) for k, p in nodes.items()}
    t0 = time.perf_counter()
    asyncio.run(_publish(a, name, n))
    publish_s = time.perf_counter() - t0
    leader_cpu = proc_cpu_s(a.pid) - cpu0["a"]
    if size > 1:
        _wait(lambda: all(_caught_up(a, nodes[r], name) for r in ("b", "c")))
    replicated_s = time.perf_counter() - t0
    total_cpu = sum(proc_cpu_s(p.pid) - cpu0[k] for k, p in nodes.items())
    return {
        "publish_rate": n / publish_s,
        "leader_cpu_us_per_msg": leader_cpu / n * 1e6,
        "all_nodes_cpu_us_per_msg": total_cpu / n * 1e6,
        "replicated_after_s": replicated_s,
    }


def _catch_up(nodes: dict[str, ServerProcess], n: int) -> dict[str, float]:
    a, c = nodes["a"], nodes["c"]
    asyncio.run(_declare(a, "catch-up", 3))
    _wait(lambda: _members_online(a, "catch-up", 3))
    c.kill()
    asyncio.run(_publish(a, "catch-up", n))
    started = time.perf_counter()
    c.restart()  # (its follower starts at the join, just before the ready line)
    ready = time.perf_counter()
    _wait(lambda: _caught_up(a, c, "catch-up"))
    done = time.perf_counter()
    size = sum(_sizes(stream_directory(a.data_dir, "/", "catch-up")).values())
    return catch_up_figures(n, size, started, ready, done)


def catch_up_figures(
    n: int, size: int, started: float, ready: float, done: float
) -> dict[str, float]:
    """A catch-up of ``n`` messages (``size`` bytes): started, ready line, caught up."""
    return {
        "messages": n,
        "bytes": size,
        "seconds_from_start": done - started,
        "seconds_from_ready": done - ready,
        "start_to_ready_s": ready - started,
        "msg_per_s_from_ready": n / (done - ready),
        "mb_per_s_from_ready": size / (done - ready) / 1e6,
        "msg_per_s_from_start": n / (done - started),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--catch-up-factor", type=int, default=10, help="x N messages")
    opts = parser.parse_args()
    with three_nodes("sievemq-repl-bench-") as nodes:
        runs: dict[str, list[dict[str, float]]] = {"no_replica": [], "two_replicas": []}
        for r in range(opts.rounds):
            runs["no_replica"].append(_case(nodes, f"alone-{r}", 1, opts.n))
            runs["two_replicas"].append(_case(nodes, f"replicated-{r}", 3, opts.n))
        catch_up = _catch_up(nodes, opts.n * opts.catch_up_factor)
    medians = {
        case: {key: statistics.median(run[key] for run in rs) for key in rs[0]}
        for case, rs in runs.items()
    }
    result = {
        "bench": "stream_replication",
        "commit": git_commit(),
        "machine": machine(),
        "load_average": os.getloadavg(),
        "n": opts.n,
        "rounds": opts.rounds,
        "medians": medians,
        "runs": runs,
        "catch_up": catch_up,
    }
    text = json.dumps(result, indent=2)
    if opts.out:
        opts.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()

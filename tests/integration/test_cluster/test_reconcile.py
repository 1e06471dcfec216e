"""Replicas re-chosen as nodes join and are forgotten: real etcd, real nodes (2 s lease).

Two nodes a and b; a stream declared with the default size (3: two members while only two
nodes run) and one of size 1. A third node c joins: the first stream gains a replica on c,
which copies it byte for byte; the size-1 stream does not. c stopped (SIGTERM): its
replicas stay where they are (a transient loss moves nothing), and a fourth node d that
joins meanwhile gets none (the stream is at its size). c forgotten (its
``sievemq/members/c`` deleted, RabbitMQ's ``forget_cluster_node``): d takes its place and
copies the stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from sievemq.cluster.coordination import EtcdClient
from sievemq.cluster.membership import MEMBERS
from sievemq.testing import ServerProcess
from sievemq.testing.etcd import EtcdProcess
from tests.chaos.checkers import replicas_equal

from .cluster_helpers import channel, cluster_args, queues, running, started_nodes, until
from .test_failover import publish

ARGS = {"x-queue-type": "stream"}


@pytest.fixture
def cluster(etcd: EtcdProcess, tmp_path: Path) -> Iterator[dict[str, ServerProcess]]:
    """a and b running; c and d made, not started (stopped after the test if started)."""
    with started_nodes(etcd, tmp_path, ("a", "b")) as procs:
        later = {n: ServerProcess(tmp_path / n, cluster_args(etcd, n)) for n in ("c", "d")}
        try:
            yield {**procs, **later}
        finally:
            for proc in later.values():
                if proc.running:
                    assert proc.stop() == 0, proc.stderr()


async def _forget(etcd: EtcdProcess, name: str) -> None:
    client = EtcdClient([etcd.url])
    try:
        await client.delete(MEMBERS + name)
    finally:
        await client.close()


def members(node: ServerProcess, stream: str) -> tuple[list[str], list[str]]:
    row = queues(node).get(stream, {})
    return list(row.get("members") or []), list(row.get("online") or [])


def copies_equal(nodes: dict[str, ServerProcess], stream: str, replicas: list[str]) -> bool:
    copies = {r: nodes[r].data_dir for r in replicas}
    return not any(replicas_equal(nodes["a"].data_dir, copies, "/", stream).values())


def test_replicas_follow_joins_and_forgets(
    etcd: EtcdProcess, cluster: dict[str, ServerProcess]
) -> None:
    a, b, c, d = (cluster[n] for n in "abcd")
    ch = channel(a)
    ch.queue_declare("grown", durable=True, arguments=ARGS)
    ch.queue_declare("single", durable=True, arguments={**ARGS, "x-initial-cluster-size": 1})
    ch.queue_declare("pair", durable=True, arguments={**ARGS, "x-initial-cluster-size": 2})
    assert members(a, "grown") == (["a", "b"], ["a", "b"])
    publish(a, "grown", [f"m{i}".encode() for i in range(500)])

    c.start()  # joins: "grown" has 2 members of 3
    for node in (a, b, c):
        until(lambda n=node: members(n, "grown") == (["a", "b", "c"],) * 2, f"c added on {node}")
    until(lambda: copies_equal(cluster, "grown", ["b", "c"]), "c's copy equals a's")
    publish(b, "grown", [f"after c {i}".encode() for i in range(100)])  # it follows on
    until(lambda: copies_equal(cluster, "grown", ["b", "c"]), "c follows a")
    assert members(a, "single")[0] == ["a"]
    assert members(a, "pair")[0] == ["a", "b"]

    assert c.stop() == 0, c.stderr()  # a transient loss
    until(lambda: not running(a).get("c", True), "a lists c stopped")
    d.start()  # joins while "grown" is at its size: no replica on d
    until(lambda: running(a).get("d"), "a lists d running")
    publish(a, "grown", [f"c down {i}".encode() for i in range(100)])
    assert members(a, "grown") == (["a", "b", "c"], ["a", "b"])
    assert members(b, "grown")[0] == ["a", "b", "c"]

    asyncio.run(_forget(etcd, "c"))  # forget_cluster_node c
    for node in (a, b, d):
        until(lambda n=node: members(n, "grown") == (["a", "b", "d"],) * 2, f"d for c on {node}")
    until(lambda: copies_equal(cluster, "grown", ["b", "d"]), "d's copy equals a's")
    assert members(a, "single")[0] == ["a"]
    assert members(a, "pair")[0] == ["a", "b"]
    assert "replaces c, forgotten, by d" in a.stderr()

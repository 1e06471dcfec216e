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

from sievemq.testing import ServerProcess
from sievemq.testing.etcd import EtcdProcess
from tests.chaos.checkers import replicas_equal

from .cluster_helpers import (
    declare_sized,
    forgotten,
    joined_node,
    members,
    sizes_kept,
    stopped_while_one_joins,
    until,
)
from .test_failover import publish

ARGS = {"x-queue-type": "stream"}


def copies_equal(nodes: dict[str, ServerProcess], stream: str, replicas: list[str]) -> bool:
    copies = {r: nodes[r].data_dir for r in replicas}
    return not any(replicas_equal(nodes["a"].data_dir, copies, "/", stream).values())


def test_replicas_follow_joins_and_forgets(
    etcd: EtcdProcess, cluster: dict[str, ServerProcess]
) -> None:
    a, b, c, d = (cluster[n] for n in "abcd")
    declare_sized(a, ARGS, "x-initial-cluster-size")
    publish(a, "grown", [f"m{i}".encode() for i in range(500)])

    joined_node(c, (a, b), "grown", ["a", "b", "c"])  # "grown" had 2 members of 3
    until(lambda: copies_equal(cluster, "grown", ["b", "c"]), "c's copy equals a's")
    publish(b, "grown", [f"after c {i}".encode() for i in range(100)])  # it follows on
    until(lambda: copies_equal(cluster, "grown", ["b", "c"]), "c follows a")
    sizes_kept(a)

    # c lost for a while; d joins while "grown" is at its size: no replica on d
    stopped_while_one_joins(c, d, a)
    publish(a, "grown", [f"c down {i}".encode() for i in range(100)])
    assert members(a, "grown") == (["a", "b", "c"], ["a", "b"])
    assert members(b, "grown")[0] == ["a", "b", "c"]

    forgotten(etcd, "c", (a, b, d), "grown", ["a", "b", "d"])
    until(lambda: copies_equal(cluster, "grown", ["b", "d"]), "d's copy equals a's")
    sizes_kept(a)
    assert "replaces c, forgotten, by d" in a.stderr()

"""Where a delivery is counted in a cluster: three real nodes, a real etcd, pika and httpx.

A consumer on ``b`` of a stream ``a`` leads reads ``b``'s replica: ``b`` counts those
deliveries and acks (its ``/metrics`` and its part of the overview, as RabbitMQ counts a
delivery at the channel's node), ``a`` and ``c`` do not; the stream's queue figures count them
on every node. A consumer on ``b`` of a classic queue
``a`` leads is relayed: ``a``'s queue counts it (and ``a``'s node: see docs/cluster.md). Either
way the cluster's overview counts each delivery once.
"""

from __future__ import annotations

import time
from typing import Any

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import consume_expected

from .cluster_helpers import (
    channel,
    declare_replicated,
    filled,
    get,
    global_counts,
    overview_since,
    publish_each,
    queues,
    until,
)

NAMES = ("a", "b", "c")  # the nodes of this module (conftest.nodes)
KINDS = ("delivered", "delivered_consume_manual_ack", "acknowledged")


def all_counts(
    nodes: dict[str, ServerProcess], queue_type: str | None
) -> dict[str, dict[str, float]]:
    """Each node's own global delivery counters for one queue type (None: all)."""
    return {name: global_counts(node, KINDS, queue_type) for name, node in nodes.items()}


def delta(
    after: dict[str, dict[str, float]], before: dict[str, dict[str, float]]
) -> dict[str, dict[str, float]]:
    return {n: {k: after[n][k] - before[n][k] for k in KINDS} for n in after}


def consume(node: ServerProcess, queue: str, count: int, arguments: dict[str, Any]) -> list[bytes]:
    """The bodies delivered on ``node`` (``count`` expected), each acked."""
    ch = channel(node)
    ch.basic_qos(prefetch_count=50)
    return [body for _, _, body in consume_expected(ch, queue, count, arguments, timeout=30)]


def read_figures(node: ServerProcess, stream: str) -> tuple[int, int]:
    """(deliver_get, ack) of the stream as ``node``'s /api/queues/VHOST/NAME shows it."""
    stats = get(node, f"/api/queues/%2F/{stream}").get("message_stats", {})
    return int(stats.get("deliver_get", 0)), int(stats.get("ack", 0))


def counted_by(
    nodes: dict[str, ServerProcess],
    queue_type: str,
    before: dict[str, dict[str, float]],
    node: str,
    n: int,
) -> None:
    """Since ``before``, ``node`` counted ``n`` deliveries and acks, the others none."""
    until(
        lambda: delta(all_counts(nodes, queue_type), before)[node]["acknowledged"] == n,
        f"{node} counts the acks",
    )
    moved = delta(all_counts(nodes, queue_type), before)
    for name in nodes:
        expected = dict.fromkeys(KINDS, n if name == node else 0)
        assert moved[name] == expected, name


def overview_counts_each_delivery_once(nodes: dict[str, ServerProcess]) -> None:
    """Any node's overview, once every node's part is fresh, totals the nodes' counters."""
    overview = overview_since(nodes["c"], time.time(), len(NAMES))
    every = all_counts(nodes, None)
    stats = overview["message_stats"]
    assert stats["deliver_get"] == sum(n["delivered"] for n in every.values())
    assert stats["ack"] == sum(n["acknowledged"] for n in every.values())


def test_a_replica_read_is_counted_by_the_consumers_node(nodes: dict[str, ServerProcess]) -> None:
    a, b = nodes["a"], nodes["b"]
    declare_replicated(a, b, "dc-three", ("a", "b", "c"))
    publisher = channel(a)
    publisher.confirm_delivery()
    publish_each(publisher, "dc-three", [f"m{i}".encode() for i in range(30)])
    before = all_counts(nodes, "rabbit_stream_queue")
    got = consume(b, "dc-three", 30, {"x-stream-offset": "first"})
    assert got == [f"m{i}".encode() for i in range(30)]
    counted_by(nodes, "rabbit_stream_queue", before, "b", 30)
    # the stream's figures, on every node, count them as its queue's (RabbitMQ's queue
    # figures count every node's channels): b's part as b last published it
    for name, node in nodes.items():
        until(
            lambda n=node: read_figures(n, "dc-three") == (30, 30),  # type: ignore[misc]
            f"{name}'s figures of the stream count b's replica reads "
            f"(now {read_figures(node, 'dc-three')})",
            timeout=60,
        )
    # the cluster's overview counts them once: the sum of every node's own counters
    overview_counts_each_delivery_once(nodes)


def test_a_relayed_delivery_is_counted_by_the_queues_leader_once(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    filled(a, "dc-jobs", [f"j{i}".encode() for i in range(20)])
    until(lambda: "dc-jobs" in queues(b), "b knows dc-jobs")
    before = all_counts(nodes, "rabbit_classic_queue")
    assert len(consume(b, "dc-jobs", 20, {})) == 20
    counted_by(nodes, "rabbit_classic_queue", before, "a", 20)
    # a's queue figures say so on every node
    until(
        lambda: get(c, "/api/queues/%2F/dc-jobs").get("message_stats", {}).get("ack") == 20,
        "c shows a's queue figures",
    )
    stats = get(b, "/api/queues/%2F/dc-jobs")["message_stats"]
    assert stats["deliver"] == 20 and stats["deliver_get"] == 20
    overview_counts_each_delivery_once(nodes)

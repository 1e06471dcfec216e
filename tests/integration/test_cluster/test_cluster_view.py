"""One view of the cluster: two real nodes, a real etcd, real pika clients.

Any node's /api/overview totals the cluster (each node's part as it last published it into
etcd, with its age), /api/queues shows a queue led elsewhere with its leader's message
figures, and every series of a node's /metrics carries its ``node`` label, with
``rabbitmq_identity_info`` naming the node and the cluster as RabbitMQ's does.
"""

from __future__ import annotations

from typing import Any

import httpx
import pika
from prometheus_client.parser import text_string_to_metric_families

from sievemq.testing import ServerProcess

from .cluster_helpers import get, until

NAMES = ("v1", "v2")  # the nodes of this module (conftest.nodes)


def publish(node: ServerProcess, queue: str, count: int, stream: bool) -> pika.BlockingConnection:
    """``count`` confirmed messages into a new durable queue on ``node``; the connection
    stays open (a connection and a channel for the totals)."""
    conn = pika.BlockingConnection(pika.URLParameters(node.url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare(queue, durable=True, arguments={"x-queue-type": "stream"} if stream else {})
    for i in range(count):
        ch.basic_publish("", queue, f"m{i}".encode())
    return conn


def test_the_overview_totals_every_node(nodes: dict[str, ServerProcess]) -> None:
    v1, v2 = nodes["v1"], nodes["v2"]
    on_v1 = publish(v1, "view-orders", 7, stream=True)
    on_v2 = publish(v2, "view-jobs", 5, stream=False)
    try:

        def summed() -> dict[str, Any] | None:
            o: dict[str, Any] = get(v1, "/api/overview")
            return o if o["queue_totals"]["messages"] == 12 else None

        overview = until(summed, "v1's overview counts v2's messages too")
        objects = overview["object_totals"]
        assert objects["connections"] >= 2 and objects["channels"] >= 2
        assert objects["queues"] >= 2
        assert overview["message_stats"]["publish"] >= 12
        sources = {s["node"]: s["age_ms"] for s in overview["sievemq"]["totals_from"]}
        assert set(sources) == {"v1", "v2"} and sources["v1"] == 0
        assert 0 <= sources["v2"] < 60_000  # published every 10 s
        # v2's own overview sums the same queues the other way round
        until(
            lambda: get(v2, "/api/overview")["queue_totals"]["messages"] == 12,
            "v2's overview counts v1's messages",
        )
    finally:
        on_v1.close()
        on_v2.close()


def test_a_queue_led_elsewhere_shows_its_leaders_figures(
    nodes: dict[str, ServerProcess],
) -> None:
    v1, v2 = nodes["v1"], nodes["v2"]
    publish(v1, "view-remote", 3, stream=False).close()

    def listed() -> dict[str, Any] | None:
        found = {q["name"]: q for q in get(v2, "/api/queues")}.get("view-remote")
        return found if found and found.get("messages") == 3 else None

    remote = until(listed, "v2 lists v1's queue with its message count")
    assert (remote["node"], remote["leader"]) == ("v1", "v1")
    assert remote["messages_ready"] == 3 and remote["messages_unacknowledged"] == 0
    assert remote["consumers"] == 0
    assert remote["message_stats"]["publish"] == 3
    assert remote["sievemq"]["figures_age_ms"] >= 0
    local = {q["name"]: q for q in get(v1, "/api/queues")}["view-remote"]
    assert local["messages"] == 3 and "figures_age_ms" not in local.get("sievemq", {})
    # the dashboard's paged list (sorted by name) and the queue's own page show it too
    page = get(v2, "/api/queues?page=1&page_size=100&sort=name&name=view-remote")
    assert [(q["name"], q["node"], q["messages"]) for q in page["items"]] == [
        ("view-remote", "v1", 3)
    ]
    one = get(v2, "/api/queues/%2F/view-remote")
    assert (one["leader"], one["messages"]) == ("v1", 3)
    assert isinstance(get(v2, "/api/queues/%2F/view-remote/bindings"), list)  # no 404
    missing = httpx.get(v2.admin_url + "/api/queues/%2F/nowhere", auth=("guest", "guest"))
    assert missing.status_code == 404


def test_every_series_names_its_node(nodes: dict[str, ServerProcess]) -> None:
    for name, node in nodes.items():
        for path in ("/metrics", "/metrics/per-object"):
            text = httpx.get(node.admin_url + path, timeout=10).text
            samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
            assert samples
            assert {s.labels.get("node") for s in samples} == {name}, path
            identity = [s.labels for s in samples if s.name == "rabbitmq_identity_info"]
            assert identity[0]["rabbitmq_node"] == name
            assert identity[0]["rabbitmq_cluster"] == get(node, "/api/cluster-name")["name"]

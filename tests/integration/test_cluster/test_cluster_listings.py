"""Cluster-wide connection, channel and consumer lists: two real nodes, a real etcd, pika.

Any node's /api/connections, /api/channels and /api/consumers (and their per-vhost and
per-connection forms) list every node's, each item naming its ``node``, as RabbitMQ's do;
DELETE /api/connections/NAME through one node closes a connection another node holds, and
the client sees RabbitMQ's 320 CONNECTION_FORCED with the reason given.
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import quote

import httpx
import pika

from sievemq.testing import ServerProcess
from sievemq.testing.etcd import EtcdProcess

from .cluster_helpers import OPEN, get, until

ETCD_SECRET_KEY = "sievemq/cluster_secret"


NAMES = ("l1", "l2")  # the nodes of this module (conftest.nodes)


def cluster_secret(etcd: EtcdProcess) -> str:
    """The cluster secret as etcd holds it (what every node reads at its join)."""
    key = base64.b64encode(ETCD_SECRET_KEY.encode()).decode()
    answer = httpx.post(etcd.url + "/v3/kv/range", json={"key": key}, timeout=10).json()
    return base64.b64decode(answer["kvs"][0]["value"]).decode()


def client(node: ServerProcess, label: str) -> pika.BlockingConnection:
    """A pika connection to ``node`` named ``label`` (closed after the test)."""
    params = pika.URLParameters(node.url)
    params.client_properties = {"connection_name": label}
    conn = pika.BlockingConnection(params)
    OPEN.append(conn)
    return conn


def consume(conn: pika.BlockingConnection, queue: str) -> None:
    """A consumer on a new classic queue of the connection's node (its own queue)."""
    ch = conn.channel()
    ch.queue_declare(queue, durable=True)
    ch.basic_consume(queue, lambda *args: None, consumer_tag=f"tag-{queue}")


def by_label(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c["user_provided_name"]: c for c in items if c.get("user_provided_name")}


def test_every_node_lists_every_nodes_connections_channels_and_consumers(
    nodes: dict[str, ServerProcess],
) -> None:
    l1, l2 = nodes["l1"], nodes["l2"]
    consume(client(l1, "app-on-l1"), "list-q1")
    consume(client(l2, "app-on-l2"), "list-q2")
    for node in (l1, l2):
        for path in ("/api/connections", "/api/vhosts/%2F/connections"):
            conns = by_label(get(node, path))
            assert conns["app-on-l1"]["node"] == "l1", path
            assert conns["app-on-l2"]["node"] == "l2", path
        for path in ("/api/channels", "/api/vhosts/%2F/channels"):
            channels = {
                c["connection_details"]["name"]: c["node"]
                for c in get(node, path)
                if c["consumer_count"] == 1
            }
            assert sorted(channels.values()) == ["l1", "l2"], path
        for path in ("/api/consumers", "/api/consumers/%2F"):
            consumers = {c["consumer_tag"]: c for c in get(node, path)}
            assert consumers["tag-list-q1"]["channel_details"]["node"] == "l1", path
            assert consumers["tag-list-q2"]["channel_details"]["node"] == "l2", path
            assert consumers["tag-list-q2"]["queue"] == {"name": "list-q2", "vhost": "/"}
    # the paged form (the dashboard's) pages the whole cluster's list
    page = get(l1, "/api/connections?page=1&page_size=100&sort=node")
    labelled = by_label(page["items"])
    assert labelled["app-on-l1"]["node"] == "l1" and labelled["app-on-l2"]["node"] == "l2"
    assert page["total_count"] == len(page["items"]) >= 2
    # one connection, and its channels, through the node that does not hold it
    remote = by_label(get(l1, "/api/connections"))["app-on-l2"]
    shown = get(l1, f"/api/connections/{quote(remote['name'], safe='')}")
    assert shown["node"] == "l2" and shown["user_provided_name"] == "app-on-l2"
    channels = get(l1, f"/api/connections/{quote(remote['name'], safe='')}/channels")
    assert [c["node"] for c in channels] == ["l2"] and channels[0]["consumer_count"] == 1
    channel_name = quote(channels[0]["name"], safe="")
    assert get(l1, f"/api/channels/{channel_name}")["node"] == "l2"
    missing = httpx.get(
        l1.admin_url + "/api/connections/nobody%20-%3E%20nowhere", auth=("guest", "guest")
    )
    assert missing.status_code == 404


def test_closing_a_connection_through_another_node(nodes: dict[str, ServerProcess]) -> None:
    l1, l2 = nodes["l1"], nodes["l2"]
    victim = client(l2, "to-close")
    target = by_label(get(l1, "/api/connections"))["to-close"]
    assert target["node"] == "l2"
    answer = httpx.delete(
        l1.admin_url + f"/api/connections/{quote(target['name'], safe='')}",
        auth=("guest", "guest"),
        headers={"X-Reason": "moving you elsewhere"},
        timeout=10,
    )
    assert answer.status_code == 204

    def closed() -> pika.exceptions.ConnectionClosedByBroker | None:
        try:
            victim.process_data_events(time_limit=0.2)
        except pika.exceptions.ConnectionClosedByBroker as error:
            return error
        return None

    error = until(closed, "the pika client sees its connection closed")
    assert error.reply_code == 320
    assert error.reply_text == "CONNECTION_FORCED - moving you elsewhere"
    until(
        lambda: "to-close" not in by_label(get(l2, "/api/connections")),
        "l2 no longer lists it",
    )


def test_a_request_with_a_wrong_cluster_secret_is_refused(
    nodes: dict[str, ServerProcess],
) -> None:
    answer = httpx.get(
        nodes["l1"].admin_url + "/api/connections",
        headers={"x-sievemq-cluster-secret": "not-the-secret"},
        timeout=10,
    )
    assert answer.status_code == 401


def test_the_cluster_secret_opens_the_lists_only(
    etcd: EtcdProcess, nodes: dict[str, ServerProcess]
) -> None:
    """A node's request with the right secret (read from etcd, as a node does) lists; the
    same secret does not open the rest of the API."""
    secret = cluster_secret(etcd)
    headers = {"x-sievemq-cluster-secret": secret}
    base = nodes["l1"].admin_url
    listed = httpx.get(base + "/api/connections", headers=headers, timeout=10)
    assert listed.status_code == 200 and "x-sievemq-partial" not in listed.headers
    assert {c["node"] for c in listed.json()} <= {"l1"}  # its own only: no fan-out
    assert httpx.get(base + "/api/users", headers=headers, timeout=10).status_code == 401
    put = httpx.put(base + "/api/vhosts/sneaky", headers=headers, timeout=10)
    assert put.status_code == 401

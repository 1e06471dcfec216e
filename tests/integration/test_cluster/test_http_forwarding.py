"""HTTP clients for any queue on any node, bindings to another node's exclusive queue, and
forwarded messages counted once: three real nodes, a real etcd, httpx and pika.

Every queue here is declared on ``a`` and used through ``b`` or ``c``: an HTTP publish routed
to it is forwarded to ``a`` and answers ``routed`` as ``a`` stored it; a get, a purge and a
stream browse are done by ``a`` for the same user. A binding to an exclusive queue whose owner
is on ``a`` is 405 RESOURCE_LOCKED on ``b`` (AMQP and HTTP). A message published through ``b``
is counted by ``b`` (the client's node) and by ``a``'s queue, never by ``a`` as a publish: the
cluster's overview counts it once.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from sievemq.testing import ServerProcess

from .cluster_helpers import (
    channel,
    filled,
    get,
    global_counts,
    overview_since,
    running,
    until,
)

AUTH = ("guest", "guest")
NAMES = ("a", "b", "c")  # the nodes of this module (conftest.nodes)


def api(node: ServerProcess, method: str, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.request(method, node.admin_url + path, auth=AUTH, timeout=30, **kwargs)


def publish(node: ServerProcess, exchange: str, key: str, payload: str, **props: Any) -> Any:
    """``POST .../publish`` on ``node``; its JSON answer (raises on an error status)."""
    answer = api(
        node,
        "POST",
        f"/api/exchanges/%2F/{exchange or 'amq.default'}/publish",
        json={
            "routing_key": key,
            "payload": payload,
            "payload_encoding": "string",
            "properties": props,
        },
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def known_everywhere(nodes: dict[str, ServerProcess], queue: str) -> None:
    for name, node in nodes.items():
        until(
            lambda n=node: any(q["name"] == queue for q in get(n, "/api/queues")),  # type: ignore[misc]
            f"{name} lists {queue}",
        )


def get_messages(node: ServerProcess, queue: str, count: int, ackmode: str) -> httpx.Response:
    return api(
        node,
        "POST",
        f"/api/queues/%2F/{queue}/get",
        json={"count": count, "ackmode": ackmode, "encoding": "auto"},
    )


def test_an_http_publish_is_forwarded_to_the_queues_leader(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    on_a = channel(a)
    on_a.queue_declare("hf-stream", durable=True, arguments={"x-queue-type": "stream"})
    on_a.queue_declare("hf-jobs", durable=True)
    known_everywhere(nodes, "hf-stream")
    known_everywhere(nodes, "hf-jobs")
    # the default exchange, through b: routed, and stored on a
    headers = {"x-stream-filter-value": "red"}
    assert publish(b, "", "hf-stream", "one", headers=headers) == {"routed": True}
    assert publish(b, "", "hf-stream", "two", headers={"x-stream-filter-value": "blue"}) == {
        "routed": True
    }
    assert publish(b, "", "hf-jobs", "job-1") == {"routed": True}
    # a named exchange, bound through c to a's queue
    channel(c).queue_bind("hf-jobs", "amq.direct", routing_key="hf-key")
    until(
        lambda: publish(b, "amq.direct", "hf-key", "job-2") == {"routed": True},
        "b routes by c's binding",
    )
    # nothing takes it: not routed
    assert publish(b, "", "hf-nowhere", "lost") == {"routed": False}
    # on a, the stream holds both messages with their filter values, in order
    browsed = api(a, "GET", "/api/streams/%2F/hf-stream/messages", params={"filter": "red"})
    assert browsed.status_code == 200, browsed.text
    assert [m["payload"] for m in browsed.json()["messages"]] == ["one"]
    got = on_a.basic_get("hf-jobs", auto_ack=True)
    assert got[2] == b"job-1"
    assert on_a.basic_get("hf-jobs", auto_ack=True)[2] == b"job-2"
    # the SieveMQ stream API's publish, through c, lands on a too
    answer = api(c, "POST", "/api/streams/%2F/hf-stream/messages", json={"payload": "three"}).json()
    assert answer == {"routed": True, "stored": True}
    everything = api(a, "GET", "/api/streams/%2F/hf-stream/messages").json()["messages"]
    assert [m["payload"] for m in everything] == ["one", "two", "three"]


def test_a_browse_through_another_node_reads_the_leaders_stream(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b = nodes["a"], nodes["b"]
    on_a = channel(a)
    on_a.queue_declare("hf-browse", durable=True, arguments={"x-queue-type": "stream"})
    on_a.confirm_delivery()
    for i in range(5):
        props = pika.BasicProperties(headers={"x-stream-filter-value": "even" if i % 2 else "odd"})
        on_a.basic_publish("", "hf-browse", f"m{i}".encode(), props)
    known_everywhere(nodes, "hf-browse")
    path = "/api/streams/%2F/hf-browse/messages"
    params = {"filter": "odd", "limit": "10"}
    on_b = api(b, "GET", path, params=params)
    assert on_b.status_code == 200, on_b.text
    assert on_b.json() == api(a, "GET", path, params=params).json()
    assert [m["payload"] for m in on_b.json()["messages"]] == ["m0", "m2", "m4"]
    # LavinMQ's browse shape too
    lavin = api(b, "POST", "/api/queues/%2F/hf-browse/stream", json={"count": 2})
    assert lavin.status_code == 200, lavin.text
    assert [m["payload"] for m in lavin.json()] == ["m0", "m1"]
    # the leader's own refusals come back as they are
    bad = api(b, "GET", path, params={"offset": "nowhere"})
    assert bad.status_code == 400 and "invalid offset" in bad.json()["reason"]
    assert api(b, "GET", "/api/streams/%2F/hf-absent/messages").status_code == 404


def test_get_and_purge_through_other_nodes_are_done_on_the_leader(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    on_a = filled(a, "hf-orders", [f"order-{i}".encode() for i in range(4)])
    known_everywhere(nodes, "hf-orders")
    # requeued: still there, redelivered next time
    peeked = get_messages(b, "hf-orders", 2, "ack_requeue_true")
    assert peeked.status_code == 200, peeked.text
    assert [(m["payload"], m["redelivered"]) for m in peeked.json()] == [
        ("order-0", False),
        ("order-1", False),
    ]
    assert peeked.json()[0]["message_count"] == 3  # a's count after the first was taken
    taken = get_messages(c, "hf-orders", 3, "ack_requeue_false").json()
    assert [(m["payload"], m["redelivered"]) for m in taken] == [
        ("order-0", True),
        ("order-1", True),
        ("order-2", False),
    ]
    assert on_a.queue_declare("hf-orders", passive=True).method.message_count == 1
    # purge through b: a's queue is empty
    purged = api(b, "DELETE", "/api/queues/%2F/hf-orders/contents")
    assert purged.status_code == 204, purged.text
    assert on_a.queue_declare("hf-orders", passive=True).method.message_count == 0
    assert get_messages(b, "hf-orders", 1, "ack_requeue_false").json() == []
    # a stream answers a's 540, an unknown queue 404, a bad ackmode is b's own 400
    on_a.queue_declare("hf-log", durable=True, arguments={"x-queue-type": "stream"})
    known_everywhere(nodes, "hf-log")
    refused = get_messages(b, "hf-log", 1, "ack_requeue_true")
    assert refused.status_code == 400 and refused.json()["reason"].startswith("540 ")
    assert get_messages(b, "hf-none", 1, "ack_requeue_true").status_code == 404
    assert api(b, "DELETE", "/api/queues/%2F/hf-none/contents").status_code == 404
    # a delete through c is done by a: gone from every node
    assert api(c, "DELETE", "/api/queues/%2F/hf-orders").status_code == 204
    for node in nodes.values():
        until(
            lambda n=node: all(q["name"] != "hf-orders" for q in get(n, "/api/queues")),  # type: ignore[misc]
            "every node forgot hf-orders",
        )
    assert api(c, "DELETE", "/api/queues/%2F/hf-orders").status_code == 404


def test_a_relayed_request_is_done_for_the_same_user(nodes: dict[str, ServerProcess]) -> None:
    a, b = nodes["a"], nodes["b"]
    on_a = channel(a)
    on_a.queue_declare("hf-private", durable=True)
    on_a.queue_declare("hf-public", durable=True)
    on_a.basic_publish("", "hf-public", b"hello")
    known_everywhere(nodes, "hf-private")
    known_everywhere(nodes, "hf-public")
    user = api(a, "PUT", "/api/users/hf-reader", json={"password": "pw", "tags": "management"})
    assert user.status_code in (201, 204)
    grant = {"configure": "", "write": ".*", "read": "^hf-public$"}
    assert api(a, "PUT", "/api/permissions/%2F/hf-reader", json=grant).status_code in (201, 204)
    body = {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}

    def as_reader(queue: str) -> httpx.Response:
        return httpx.post(
            b.admin_url + f"/api/queues/%2F/{queue}/get",
            json=body,
            auth=("hf-reader", "pw"),
            timeout=30,
        )

    until(lambda: as_reader("hf-public").status_code == 200, "b relays hf-reader's get")
    assert [m["payload"] for m in as_reader("hf-public").json()] == ["hello"]
    assert as_reader("hf-private").status_code == 401
    # a relay needs the cluster secret: a forged one is refused
    forged = httpx.post(
        a.admin_url + "/api/queues/%2F/hf-private/get",
        json=body,
        headers={"x-sievemq-cluster-user": "guest", "x-sievemq-cluster-secret": "wrong"},
        timeout=30,
    )
    assert forged.status_code == 401


def test_a_binding_to_another_nodes_exclusive_queue_is_405(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b = nodes["a"], nodes["b"]
    owner = channel(a)
    owner.queue_declare("hf-mine", exclusive=True)

    def bind_on_b() -> int:
        try:
            channel(b).queue_bind("hf-mine", "amq.direct", routing_key="hf-mine")
        except ChannelClosedByBroker as closed:
            assert closed.reply_code in (404, 405)
            if closed.reply_code == 405:
                assert closed.reply_text.startswith(
                    "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'hf-mine'"
                )
            return int(closed.reply_code)
        return 200

    until(lambda: bind_on_b() == 405, "b refuses the binding with 405")
    with pytest.raises(ChannelClosedByBroker) as unbound:
        channel(b).queue_unbind("hf-mine", "amq.direct", routing_key="hf-mine")
    assert unbound.value.reply_code == 405
    over_http = api(b, "POST", "/api/bindings/%2F/e/amq.direct/q/hf-mine", json={})
    assert over_http.status_code == 400
    assert over_http.json()["reason"].startswith(
        "405 RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'hf-mine'"
    )
    assert not [
        x
        for x in get(b, "/api/bindings/%2F")
        if x["destination"] == "hf-mine" and x["source"] == "amq.direct"
    ]
    # the owner binds it as ever, and a publish on a routes by the binding
    owner.queue_bind("hf-mine", "amq.direct", routing_key="hf-mine")
    owner.basic_publish("amq.direct", "hf-mine", b"mine")
    until(lambda: owner.basic_get("hf-mine", auto_ack=True)[2] == b"mine", "routed to hf-mine")


def node_counts(node: ServerProcess) -> dict[str, float]:
    """The node's own message counters, from its /metrics (both protocols, every queue
    type: the overview's publish counts both protocols)."""
    return global_counts(node, ("received", "confirmed", "delivered_get_manual_ack"))


def test_a_forwarded_message_is_counted_once(nodes: dict[str, ServerProcess]) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    on_a = channel(a)
    on_a.queue_declare("hf-counted", durable=True, arguments={"x-queue-type": "stream"})
    on_a.queue_declare("hf-tasks", durable=True)
    known_everywhere(nodes, "hf-counted")
    known_everywhere(nodes, "hf-tasks")
    before = {name: node_counts(node) for name, node in nodes.items()}
    count = 60
    on_b = channel(b)
    on_b.confirm_delivery()
    for i in range(count):
        on_b.basic_publish("", "hf-counted", f"m{i}".encode())
    assert publish(b, "", "hf-counted", "over-http") == {"routed": True}
    for i in range(5):
        on_b.basic_publish("", "hf-tasks", f"t{i}".encode())
    for _ in range(5):  # taken through b: delivered by a's queue
        method, _props, _body = on_b.basic_get("hf-tasks")
        on_b.basic_ack(method.delivery_tag)
    after = {name: node_counts(node) for name, node in nodes.items()}
    delta = {name: {k: after[name][k] - before[name][k] for k in before[name]} for name in nodes}
    # b, the client's node, counts every publish and confirm; a, the leader, none of them;
    # a's queue counts the gets (RabbitMQ would count them at b's channel: the sum is one)
    assert delta["b"] == {
        "received": count + 6,
        "confirmed": count + 5,
        "delivered_get_manual_ack": 0,
    }
    assert delta["a"] == {"received": 0, "confirmed": 0, "delivered_get_manual_ack": 5}
    assert delta["c"] == {"received": 0, "confirmed": 0, "delivered_get_manual_ack": 0}
    # a's queue counts what it stored, and every node shows a's figures for it
    until(
        lambda: (
            get(c, "/api/queues/%2F/hf-counted").get("message_stats", {}).get("publish")
            == count + 1
        ),
        "c shows a's published count",
    )
    # the cluster's overview, once every node's part was published after the messages
    overview = overview_since(c, time.time(), len(NAMES))
    stats = overview["message_stats"]
    assert stats["publish"] == sum(n["received"] for n in after.values())
    assert stats["confirm"] == sum(n["confirmed"] for n in after.values())


def test_a_stopped_leaders_queues_answer_honestly(nodes: dict[str, ServerProcess]) -> None:
    """Last in the module: it stops ``a``."""
    a, b = nodes["a"], nodes["b"]
    channel(a).queue_declare("hf-away", durable=True)
    known_everywhere(nodes, "hf-away")
    assert a.stop() == 0
    until(lambda: not running(b)["a"], "b lists a stopped")
    # a publish to it is not stored, and says so; a get or purge names a as down
    answer = api(
        b,
        "POST",
        "/api/exchanges/%2F/amq.default/publish",
        json={
            "routing_key": "hf-away",
            "payload": "x",
            "payload_encoding": "string",
            "properties": {},
        },
    )
    assert answer.status_code == 400, answer.text
    assert "could not be stored" in answer.json()["reason"]
    for refused in (
        get_messages(b, "hf-away", 1, "ack_requeue_true"),
        api(b, "DELETE", "/api/queues/%2F/hf-away/contents"),
    ):
        assert refused.status_code == 404
        assert refused.json()["reason"] == (
            "NOT_FOUND - home node 'a' of durable queue 'hf-away' in vhost '/' is down or "
            "inaccessible"
        )

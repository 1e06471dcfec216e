"""SieveMQ's stream API through any node: three real nodes, a real etcd, httpx and pika.

Every stream here is declared on ``a``. Every node's stream lists show it once. Through
``b``, each per-stream route of
``/api/streams/VHOST/NAME/...`` answers as ``a`` does: facts, consumers, named consumer
offsets (read, stored, deleted: on ``a``, which ships them to its replicas), SQL
subscriptions, filter advice, and a delete. The message browsers on a node that holds a
replica read that copy (they still answer while ``a`` is frozen); on a node that holds none,
``a`` reads. A stream's consumers, asked of any node, are its leader's and those reading
every node's replica.
"""

from __future__ import annotations

from typing import Any

import httpx
import pika

from sievemq.testing import ServerProcess

from .cluster_helpers import channel, declare_replicated, queues, stopped, until

AUTH = ("guest", "guest")
NAMES = ("a", "b", "c")  # the nodes of this module (conftest.nodes)


def api(node: ServerProcess, method: str, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.request(method, node.admin_url + path, auth=AUTH, timeout=30, **kwargs)


def tags(node: ServerProcess, path: str) -> list[str]:
    """The consumer tags of a consumer list on ``node``."""
    return [str(x["consumer_tag"]) for x in api(node, "GET", path).json()]


def publish(node: ServerProcess, stream: str, count: int) -> None:
    """``count`` confirmed messages, filter values odd/even."""
    ch = channel(node)
    ch.confirm_delivery()
    for i in range(count):
        props = pika.BasicProperties(headers={"x-stream-filter-value": "odd" if i % 2 else "even"})
        ch.basic_publish("", stream, f"m{i}".encode(), props)


def test_every_per_stream_route_answers_through_another_node(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    arguments = {"x-queue-type": "stream", "x-initial-cluster-size": 1}  # no replica on b
    on_a = channel(a)
    on_a.queue_declare("sa-one", durable=True, arguments=arguments)
    publish(a, "sa-one", 10)
    until(lambda: "sa-one" in queues(b), "b knows sa-one")
    base = "/api/streams/%2F/sa-one"
    # the stream's facts, as a answers them
    facts = api(b, "GET", base)
    assert facts.status_code == 200, facts.text
    assert facts.json()["name"] == "sa-one" and facts.json()["messages"] == 10
    assert facts.json() == api(a, "GET", base).json()
    # the lists on every node show it once, with a's figures
    for node in nodes.values():
        for path in ("/api/streams", "/api/streams/%2F"):
            listed = api(node, "GET", path)
            assert listed.status_code == 200 and "x-sievemq-partial" not in listed.headers
            mine = [x for x in listed.json() if x["name"] == "sa-one"]
            assert len(mine) == 1 and mine[0]["messages"] == 10, (path, mine)
    # a consumer on a is listed through b
    consumer = channel(a)
    consumer.basic_qos(prefetch_count=5)
    consumer.basic_consume("sa-one", lambda *_: None, consumer_tag="sa-reader")
    listed = api(b, "GET", base + "/consumers")
    assert listed.status_code == 200, listed.text
    assert [x["consumer_tag"] for x in listed.json()] == ["sa-reader"]
    # named consumer offsets: stored through b on a, read and deleted through c
    assert api(b, "GET", base + "/offsets").json() == []
    stored = api(b, "PUT", base + "/consumers/sa-app/offset", json={"offset": 3})
    assert stored.status_code == 204, stored.text
    assert api(a, "GET", base + "/offsets").json() == [
        {"stream": "sa-one", "vhost": "/", "consumer": "sa-app", "offset": 3, "lag": 6}
    ]
    assert api(c, "GET", base + "/offsets").json() == api(a, "GET", base + "/offsets").json()
    one = api(c, "GET", base + "/consumers/sa-app/offset")
    assert one.status_code == 200 and one.json()["offset"] == 3
    assert api(c, "GET", base + "/consumers/sa-none/offset").status_code == 404
    bad = api(b, "PUT", base + "/consumers/sa-app/offset", json={"offset": -1})
    assert bad.status_code in (400, 422)
    assert api(c, "DELETE", base + "/consumers/sa-app/offset").status_code == 204
    assert api(a, "GET", base + "/offsets").json() == []
    assert api(c, "DELETE", base + "/consumers/sa-app/offset").status_code == 404
    # subscriptions and filter advice, as a answers them
    subs = api(b, "GET", base + "/subscriptions")
    assert subs.status_code == 200 and subs.json() == api(a, "GET", base + "/subscriptions").json()
    advice = api(b, "GET", base + "/filter-advice", params={"target_fpr": "0.05"})
    assert advice.status_code == 200, advice.text
    assert advice.json()["name"] == "sa-one"
    assert advice.json()["chunks_sampled"] >= 1
    assert (
        advice.json()
        == api(a, "GET", base + "/filter-advice", params={"target_fpr": "0.05"}).json()
    )
    # a refusal of the request itself is the same through b
    out_of_range = {"target_fpr": "2"}
    refused = api(b, "GET", base + "/filter-advice", params=out_of_range)
    assert refused.status_code == 400
    assert refused.json() == api(a, "GET", base + "/filter-advice", params=out_of_range).json()
    # a stream no node has: 404 on every route
    for path in ("", "/consumers", "/offsets", "/subscriptions", "/filter-advice"):
        assert api(b, "GET", "/api/streams/%2F/sa-absent" + path).status_code == 404, path
    # a declare of it through b is 204, as an AMQP declare of it is declare-ok there
    assert api(b, "PUT", base, json={"arguments": {}}).status_code == 204
    # a delete through b deletes it on a, and everywhere
    consumer.close()
    assert api(b, "DELETE", base).status_code == 204
    for node in nodes.values():
        until(lambda n=node: "sa-one" not in queues(n), "every node forgot sa-one")  # type: ignore[misc]
    assert api(b, "GET", base).status_code == 404


def test_a_user_without_read_permission_is_refused_by_the_leader(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b = nodes["a"], nodes["b"]
    arguments = {"x-queue-type": "stream", "x-initial-cluster-size": 1}
    channel(a).queue_declare("sa-private", durable=True, arguments=arguments)
    until(lambda: "sa-private" in queues(b), "b knows sa-private")
    user = api(a, "PUT", "/api/users/sa-user", json={"password": "pw", "tags": "management"})
    assert user.status_code in (201, 204)
    grant = {"configure": "", "write": "", "read": "^sa-public$"}
    assert api(a, "PUT", "/api/permissions/%2F/sa-user", json=grant).status_code in (201, 204)
    path = "/api/streams/%2F/sa-private/consumers/x/offset"
    mine = ("sa-user", "pw")
    until(
        lambda: httpx.get(b.admin_url + "/api/whoami", auth=mine, timeout=30).status_code == 200,
        "b knows sa-user",
    )
    refused = httpx.put(b.admin_url + path, json={"offset": 1}, auth=mine, timeout=30)
    assert refused.status_code == 401, refused.text
    assert api(a, "GET", "/api/streams/%2F/sa-private/offsets").json() == []


def test_a_replica_node_browses_its_own_copy(nodes: dict[str, ServerProcess]) -> None:
    """Last in the module: it freezes ``a`` for a moment."""
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    declare_replicated(a, b, "sa-three", ("a", "b", "c"))
    publish(a, "sa-three", 9)
    path = "/api/streams/%2F/sa-three/messages"
    params = {"filter": "odd", "limit": "10"}
    on_a = api(a, "GET", path, params=params).json()
    assert [m["payload"] for m in on_a["messages"]] == ["m1", "m3", "m5", "m7"]
    for node in (b, c):  # the committed offset reaches the replicas a moment later
        until(
            lambda n=node: api(n, "GET", path, params=params).json() == on_a,  # type: ignore[misc]
            "the replica's browse shows what a's does",
        )
    lavin = api(c, "POST", "/api/queues/%2F/sa-three/stream", json={"count": 3})
    assert lavin.status_code == 200, lavin.text
    assert [(m["payload"], m["offset"]) for m in lavin.json()] == [("m0", 0), ("m1", 1), ("m2", 2)]
    # a consumer on b reads b's copy: the stream's consumers, asked of any node, list it
    reader = channel(b)
    reader.basic_qos(prefetch_count=5)
    reader.basic_consume(
        "sa-three", lambda *_: None, consumer_tag="sa-local", arguments={"x-stream-offset": 0}
    )
    for node in nodes.values():
        until(
            lambda n=node: tags(n, "/api/streams/%2F/sa-three/consumers") == ["sa-local"],  # type: ignore[misc]
            "every node lists b's replica reader",
        )
    for node in nodes.values():  # and counted in its consumers (b's part up to 10 s old)
        until(
            lambda n=node: api(n, "GET", "/api/queues/%2F/sa-three").json()["consumers"] == 1,  # type: ignore[misc]
            "every node counts b's replica reader in the stream's consumers",
            timeout=60,
        )
    everyone = api(c, "GET", "/api/consumers").json()
    assert [x["channel_details"]["node"] for x in everyone if x["consumer_tag"] == "sa-local"] == [
        "b"
    ]
    # with a frozen, b and c still browse: from their copies, not through a
    with stopped(a):
        frozen = api(b, "GET", path, params=params)
        lavin_frozen = api(c, "POST", "/api/queues/%2F/sa-three/stream", json={"count": 3})
    assert frozen.status_code == 200 and frozen.json() == on_a
    assert lavin_frozen.json() == lavin.json()

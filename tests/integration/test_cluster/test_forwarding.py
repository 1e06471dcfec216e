"""Publishes through a node that does not lead the queue: forwarded over the inter-node link.

Two real nodes and a real etcd; pika and aio-pika clients publish through node b to queues
node a leads, with confirms, and read them back on a. The link's cluster port refuses a
connection without the cluster secret, and the secret shows nowhere. The last test kills
the leader while a client publishes through b: nothing is confirmed that a does not hold.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import aio_pika
import httpx
import pika
import pytest
from pika.exceptions import AMQPConnectionError, ProbableAccessDeniedError

from sievemq.testing import ServerProcess
from sievemq.testing.etcd import EtcdProcess

from .cluster_helpers import (
    OPEN,
    WAIT_S,
    channel,
    get,
    numbered,
    publish_each,
    publish_pipelined,
    until,
)

STREAM = {"x-queue-type": "stream"}
FILTER = "x-stream-filter-value"


def confirming(node: ServerProcess) -> Any:
    """A pika channel on ``node`` in confirm mode (a publish raises on a nack)."""
    on = channel(node)
    on.confirm_delivery()
    return on


def declared_on(leader: ServerProcess, other: ServerProcess, name: str, arguments: Any) -> None:
    """Declare ``name`` on its leader and wait until the other node knows where it lives."""
    channel(leader).queue_declare(name, durable=True, arguments=arguments)
    until(
        lambda: {q["name"]: q for q in get(other, "/api/queues")}.get(name, {}).get("leader"),
        f"{other.data_dir.name} knows {name}",
    )


def read_stream(node: ServerProcess, name: str, count: int, arguments: Any = None) -> list[Any]:
    """``count`` deliveries of stream ``name`` from the first offset, through ``node``."""
    ch = channel(node)
    ch.basic_qos(prefetch_count=500)
    got: list[Any] = []
    args = {"x-stream-offset": "first", **(arguments or {})}
    for method, props, body in ch.consume(name, arguments=args, inactivity_timeout=WAIT_S):
        assert method is not None, f"{len(got)} of {count} deliveries from {name}"
        got.append((method, props, body))
        ch.basic_ack(method.delivery_tag)
        if len(got) == count:
            break
    ch.cancel()
    return got


def cluster_port(node: ServerProcess) -> int:
    return int(node.stdout_lines[0].rsplit(":", 1)[1])


def etcd_secret(etcd: EtcdProcess) -> str:
    key = base64.b64encode(b"sievemq/cluster_secret").decode()
    answer = httpx.post(etcd.url + "/v3/kv/range", json={"key": key}, timeout=10).json()
    return base64.b64decode(answer["kvs"][0]["value"]).decode()


def test_publishes_through_b_reach_a_stream_led_by_a_in_order_and_filtered(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b = nodes["a"], nodes["b"]
    declared_on(a, b, "events", STREAM)
    on_b = confirming(b)
    colours = ["red", "blue", "green"]
    for i in range(300):
        props = pika.BasicProperties(
            headers={FILTER: colours[i % 3], "n": i}, message_id=f"m{i}", timestamp=1000 + i
        )
        # confirmed by pika only once a stored it (publish raises on a nack)
        on_b.basic_publish("", "events", f"event {i}".encode(), props, mandatory=True)
    everything = read_stream(a, "events", 300)
    assert [body for _, _, body in everything] == [f"event {i}".encode() for i in range(300)]
    method, props, _ = everything[7]
    assert (method.exchange, method.routing_key) == ("", "events")
    assert props.message_id == "m7" and props.headers["n"] == 7 and props.timestamp == 1007
    blue = read_stream(a, "events", 100, {"x-stream-filter": "blue"})
    assert [body for _, _, body in blue] == [f"event {i}".encode() for i in range(1, 300, 3)]


def test_filter_values_found_by_b_are_the_ones_a_stores(nodes: dict[str, ServerProcess]) -> None:
    """b tells a where the filter values are; an array of values and a header before them
    that holds the filter header's name read back filtered on a as published."""
    a, b = nodes["a"], nodes["b"]
    declared_on(a, b, "marked", STREAM)
    on_b = confirming(b)
    decoy = "\x15x-stream-filter-valueS\x00\x00\x00\x03red"
    shapes: list[dict[str, Any]] = [
        {FILTER: ["red", "blue"]},
        {"a": decoy, FILTER: "green"},
        {"a": FILTER, "n": 1},
        {FILTER: "blue", "b": decoy},
    ]
    for i, headers in enumerate(shapes * 25):
        on_b.basic_publish("", "marked", f"{i}".encode(), pika.BasicProperties(headers=headers))
    for colour, shape_numbers in (("red", {0}), ("blue", {0, 3}), ("green", {1})):
        wanted = [i for i in range(100) if i % 4 in shape_numbers]
        got = read_stream(a, "marked", len(wanted), {"x-stream-filter": colour})
        assert [int(body) for _, _, body in got] == wanted, colour


def test_a_bad_filter_value_through_b_gets_the_reply_a_gives(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b = nodes["a"], nodes["b"]
    declared_on(a, b, "checked", STREAM)
    replies = []
    for node in (a, b):
        on = confirming(node)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            on.basic_publish("", "checked", b"x", pika.BasicProperties(headers={FILTER: 5}))
        replies.append((refused.value.reply_code, refused.value.reply_text))
    assert replies[0] == replies[1] and replies[0][0] == 406, replies


def test_publishes_through_b_reach_a_classic_queue_led_by_a(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b = nodes["a"], nodes["b"]
    declared_on(a, b, "jobs", None)
    jobs = numbered("job", 50)
    publish_each(confirming(b), "jobs", jobs, properties=pika.BasicProperties(priority=1))
    on_a = channel(a)
    got: list[bytes] = []
    for _ in range(50):
        method, props, body = on_a.basic_get("jobs", auto_ack=True)
        assert method is not None, f"only {len(got)} jobs on a"
        assert props.priority == 1
        got.append(body)
    assert got == jobs
    assert on_a.basic_get("jobs", auto_ack=True)[0] is None


def test_an_unroutable_mandatory_publish_through_b_is_returned(
    nodes: dict[str, ServerProcess],
) -> None:
    on_b = confirming(nodes["b"])
    with pytest.raises(pika.exceptions.UnroutableError):
        on_b.basic_publish("", "nowhere", b"x", mandatory=True)


def test_many_pipelined_publishes_through_b_are_all_confirmed_and_stored(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b = nodes["a"], nodes["b"]
    declared_on(a, b, "bulk", STREAM)
    total = 5000
    messages = [("bulk", aio_pika.Message(f"{i}".encode())) for i in range(total)]
    assert publish_pipelined(b, messages) == ["Ack"] * total
    bodies = [body for _, _, body in read_stream(a, "bulk", total)]
    assert bodies == [f"{i}".encode() for i in range(total)]


def test_dedup_headers_pass_through_the_link(nodes: dict[str, ServerProcess]) -> None:
    a, b = nodes["a"], nodes["b"]
    declared_on(a, b, "once", STREAM)
    on_b = confirming(b)
    for pid in (1, 2, 2, 1, 3):  # the repeats are confirmed and stored nowhere
        headers = {"x-sievemq-publisher": "p1", "x-sievemq-publishing-id": pid}
        on_b.basic_publish("", "once", f"{pid}".encode(), pika.BasicProperties(headers=headers))
    on_a = confirming(a)
    on_a.basic_publish("", "once", b"end")
    assert [body for _, _, body in read_stream(a, "once", 4)] == [b"1", b"2", b"3", b"end"]


def test_the_cluster_port_refuses_a_link_without_the_secret(
    etcd: EtcdProcess, nodes: dict[str, ServerProcess]
) -> None:
    a = nodes["a"]
    port = cluster_port(a)
    for user, password in (("b", "not the secret"), ("guest", "guest")):
        params = pika.ConnectionParameters(
            "127.0.0.1", port, credentials=pika.PlainCredentials(user, password)
        )
        with pytest.raises((ProbableAccessDeniedError, AMQPConnectionError)) as refused:
            pika.BlockingConnection(params)
        assert "403" in str(refused.value) or "ACCESS_REFUSED" in str(refused.value)
    secret = etcd_secret(etcd)
    assert len(secret) >= 32
    # with the secret, a link may open any vhost: trusted, it acts for checked clients
    linked = pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", port, credentials=pika.PlainCredentials("b", secret))
    )
    OPEN.append(linked)
    assert linked.channel().is_open
    # the secret is in etcd only: not in the logs, not in the admin API
    for node in nodes.values():
        assert secret not in node.stderr()
        for path in ("/api/nodes", "/api/overview", "/api/definitions", "/api/connections"):
            assert secret not in json.dumps(get(node, path))
    # a link is not one of the node's client connections
    assert all(c["user"] != "cluster-link:b" for c in get(a, "/api/connections"))


def test_the_leader_killed_while_b_forwards_nothing_confirmed_is_lost(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b = nodes["a"], nodes["b"]
    declared_on(a, b, "survive", STREAM)
    outcomes: dict[int, str] = {}

    async def publish() -> None:
        conn = await aio_pika.connect(b.url)
        try:
            ch = await conn.channel(publisher_confirms=True)

            async def one(i: int) -> None:
                try:
                    await ch.default_exchange.publish(aio_pika.Message(f"{i}".encode()), "survive")
                    outcomes[i] = "ack"
                except Exception as error:  # a nack, or the channel closed: not confirmed
                    outcomes[i] = type(error).__name__

            pending = []
            for i in range(20000):
                pending.append(asyncio.ensure_future(one(i)))
                if i % 100 == 99:
                    await asyncio.sleep(0)
                if i == 2000:
                    await asyncio.wait_for(pending[500], WAIT_S)  # a is storing them
                    a.kill()
                if ch.is_closed:
                    break
            await asyncio.wait(pending, timeout=WAIT_S)
        finally:
            await conn.close()

    asyncio.run(publish())
    acked = sorted(i for i, outcome in outcomes.items() if outcome == "ack")
    not_acked = [i for i, outcome in outcomes.items() if outcome != "ack"]
    assert acked and not_acked, outcomes  # some stored before the kill, some refused after
    assert "the link" in b.stderr() or "forwarded to node 'a' are nacked" in b.stderr()
    a.restart()  # on its data: every confirmed publish must be there
    until(lambda: "survive" in {q["name"] for q in get(a, "/api/queues")}, "a is back")
    stored = {int(body) for _, _, body in read_stream(a, "survive", len(acked))}
    assert set(acked) <= stored
    # b forwards to a again (a is back on another cluster port): nacked until the link is up
    on_b = confirming(b)

    def forwarded_again() -> bool:
        try:
            on_b.basic_publish("", "survive", b"-1")
        except pika.exceptions.NackError:
            return False
        return True

    until(forwarded_again, "b forwards to the restarted a")

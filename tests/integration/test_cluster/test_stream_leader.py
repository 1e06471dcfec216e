"""Stream clients go to the leader, and queues placed by ``x-queue-leader-locator``: three
real nodes and a real etcd; rstream, pika and the HTTP API as users drive them.

Metadata on any node names the stream's leader (its advertised stream listener), so
rstream's Producer and Consumer, connected first to a node that does not lead the stream,
publish and consume on the leader. A Declare Publisher or Subscribe on a node that does not
lead the stream answers 6 (STREAM_NOT_AVAILABLE), as RabbitMQ answers on a node without a
member. Create through any node places the stream there; Delete through any node is asked
of the leader through the stream's etcd record. ``balanced`` places a new queue on the live
node leading the fewest queues.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import httpx
import pytest
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker
from rstream import AMQPMessage, Consumer, MessageContext, amqp_decoder, exceptions, schema
from rstream.client import Client

from sievemq.cluster.coordination import EtcdClient
from sievemq.cluster.membership import NODES
from sievemq.cluster.placement import queue_key
from sievemq.testing import ServerProcess
from sievemq.testing.etcd import EtcdProcess
from sievemq.testing.stream_client import consumer, open_client, producer, send_confirmed
from sievemq.testing.wait import eventually

from .cluster_helpers import channel, get, queues, until

STREAM = {"x-queue-type": "stream"}
STREAM_NOT_AVAILABLE = 6


NAMES = ("a", "b", "c")  # the nodes of this module (conftest.nodes)


def known_everywhere(nodes: dict[str, ServerProcess], name: str, leader: str) -> None:
    for node in nodes.values():
        until(
            lambda n=node: queues(n).get(name, {}).get("node") == leader,  # type: ignore[misc]
            f"every node lists {name} led by {leader}",
        )


def local_names(node: ServerProcess) -> set[str]:
    """The queues ``node`` itself holds (its own /api/queues rows with its own name)."""
    name = get(node, "/api/overview")["node"]
    return {q["name"] for q in get(node, "/api/queues") if q["node"] == name}


async def metadata(client: Client, stream: str) -> tuple[int, int, list[tuple[str, int]]]:
    """(code, leader reference, brokers) of one stream, as the server answered."""
    answer = await client.sync_request(
        schema.Metadata(client._corr_id_seq.next(), streams=[stream]),
        resp_schema=schema.MetadataResponse,
        raise_exception=False,
    )
    [item] = answer.metadata
    return item.response_code, item.leader_ref, [(b.host, b.port) for b in answer.brokers]


async def test_metadata_names_the_leader_on_every_node(nodes: dict[str, ServerProcess]) -> None:
    a = nodes["a"]
    creator = await open_client(a)
    try:
        await creator.create_stream("meta-a")
    finally:
        await creator.close()
    known_everywhere(nodes, "meta-a", "a")
    for node in nodes.values():
        client = await open_client(node)
        try:
            leader, replicas = await client.query_leader_and_replicas("meta-a")
            assert (leader.host, leader.port) == ("127.0.0.1", a.stream_port)
            # the default x-initial-cluster-size, 3: replicas on b and c (test_replication)
            ports = sorted(r.port for r in replicas)
            assert ports == sorted([nodes["b"].stream_port, nodes["c"].stream_port])
            code, ref, brokers = await metadata(client, "nowhere")
            assert (code, ref, brokers) == (2, 0xFFFF, [])  # STREAM_DOES_NOT_EXIST
            with pytest.raises(exceptions.StreamDoesNotExist):
                await client.query_leader_and_replicas("nowhere")
        finally:
            await client.close()


async def test_rstream_publishes_and_consumes_on_the_leader_from_another_node(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b = nodes["a"], nodes["b"]
    # one copy only: b holds no replica of it (a replica takes subscribers itself)
    alone = {**STREAM, "x-initial-cluster-size": 1}
    channel(a).queue_declare("orders-a", durable=True, arguments=alone)
    known_everywhere(nodes, "orders-a", "a")

    # straight on b, which does not lead it: RabbitMQ's code for "no member here"
    direct = await open_client(b)
    try:
        with pytest.raises(exceptions.StreamNotAvailable):
            await direct.declare_publisher("orders-a", "", 1)
        with pytest.raises(exceptions.StreamNotAvailable):
            await direct.subscribe("orders-a", 1)
    finally:
        await direct.close()

    # rstream's Producer and Consumer, given b, follow Metadata to a
    async with producer(b) as p:
        await send_confirmed(p, "orders-a", [AMQPMessage(body=f"m{i}".encode()) for i in range(5)])
    on_a = until(lambda: queues(a)["orders-a"].get("messages") == 5, "a holds the 5 messages")
    assert on_a
    assert "orders-a" not in local_names(b)

    got: list[bytes] = []

    async def on_message(msg: AMQPMessage, ctx: MessageContext) -> None:
        got.append(bytes(msg.body))

    c: Consumer = consumer(b)
    await c.start()
    try:
        await c.subscribe("orders-a", on_message, decoder=amqp_decoder)
        await eventually(lambda: len(got) == 5)
    finally:
        await c.close()
    assert got == [f"m{i}".encode() for i in range(5)]


async def test_create_places_on_the_receiving_node_and_delete_goes_to_the_leader(
    nodes: dict[str, ServerProcess],
) -> None:
    b, c = nodes["b"], nodes["c"]
    on_c, on_b = await open_client(c), await open_client(b)
    try:
        await on_c.create_stream("made-on-c")  # client-local
        known_everywhere(nodes, "made-on-c", "c")
        with pytest.raises(exceptions.StreamAlreadyExists):
            await on_b.create_stream("made-on-c")
        assert "made-on-c" not in local_names(b)

        await on_b.delete_stream("made-on-c")  # b asks c through the record
        for node in nodes.values():
            until(lambda n=node: "made-on-c" not in queues(n), "every node forgets it")  # type: ignore[misc]
        with pytest.raises(exceptions.StreamDoesNotExist):
            await on_b.delete_stream("made-on-c")
    finally:
        await on_c.close()
        await on_b.close()


def leaders(node: ServerProcess) -> Counter[str]:
    return Counter(q["node"] for q in get(node, "/api/queues"))


def fewest(nodes: dict[str, ServerProcess], seen: Counter[str]) -> str:
    return min(sorted(nodes), key=lambda n: seen[n])


async def test_balanced_places_on_the_node_leading_the_fewest(
    nodes: dict[str, ServerProcess],
) -> None:
    a = nodes["a"]
    ch = channel(a)
    for i in range(4):  # a leads the most from now on: balanced never picks it
        ch.queue_declare(f"local-{i}", durable=True)
    known_everywhere(nodes, "local-3", "a")

    placed: dict[str, str] = {}
    for name, arguments in (
        ("bal-stream", {**STREAM, "x-queue-leader-locator": "balanced"}),
        ("bal-classic", {"x-queue-leader-locator": "balanced"}),
        ("bal-quorum", {"x-queue-type": "quorum", "x-queue-leader-locator": "balanced"}),
    ):
        expected = fewest(nodes, leaders(a))
        assert expected != "a"
        ok = ch.queue_declare(name, durable=True, arguments=arguments)
        assert (ok.method.message_count, ok.method.consumer_count) == (0, 0)
        # the declare-ok came once the chosen node made it: it is there now
        assert name in local_names(nodes[expected]), name
        assert name not in local_names(a)
        known_everywhere(nodes, name, expected)
        placed[name] = expected
    assert set(placed.values()) == {"b", "c"}

    # through its leader the queue works as any other (forwarding is not this test's)
    leader = nodes[placed["bal-classic"]]
    on_leader = channel(leader)
    on_leader.basic_publish("", "bal-classic", b"hello")
    method, _, body = on_leader.basic_get("bal-classic", auto_ack=True)
    assert method is not None and body == b"hello"

    # the Stream protocol's Create with queue-leader-locator, and the HTTP API
    expected = fewest(nodes, leaders(a))
    client = await open_client(a)
    try:
        await client.create_stream("bal-created", {"queue-leader-locator": "balanced"})
    finally:
        await client.close()
    assert "bal-created" in local_names(nodes[expected])
    expected = fewest(nodes, leaders(a))
    response = httpx.put(
        a.admin_url + "/api/queues/%2F/bal-http",
        json={"durable": True, "arguments": {"x-queue-leader-locator": "balanced"}},
        auth=("guest", "guest"),
        timeout=30,
    )
    assert response.status_code == 201, response.text
    assert "bal-http" in local_names(nodes[expected])

    # a policy's queue-leader-locator, as RabbitMQ's
    response = httpx.put(
        a.admin_url + "/api/policies/%2F/spread",
        json={"pattern": "^spread-", "definition": {"queue-leader-locator": "balanced"}},
        auth=("guest", "guest"),
        timeout=30,
    )
    assert response.status_code in (201, 204), response.text
    expected = fewest(nodes, leaders(a))
    ch.queue_declare("spread-1", durable=True)
    assert "spread-1" in local_names(nodes[expected])
    ch.queue_declare("other-1", durable=True)  # the policy does not match: client-local
    assert "other-1" in local_names(a)


def test_a_locator_that_is_not_one_is_refused(nodes: dict[str, ServerProcess]) -> None:
    ch = channel(nodes["a"])
    with pytest.raises(ChannelClosedByBroker) as refused:
        ch.queue_declare("bad-locator", durable=True, arguments={"x-queue-leader-locator": "near"})
    assert refused.value.reply_code == 406
    text = refused.value.reply_text
    assert "x-queue-leader-locator" in text and "'client-local' or 'balanced'" in text


async def test_a_node_that_does_not_answer_is_named(
    etcd: EtcdProcess, nodes: dict[str, ServerProcess]
) -> None:
    """A live-listed node that never acts on etcd (a record written here, no process): a
    stream it leads has no leader in Metadata (6), and a ``balanced`` declare it is chosen
    for fails with 541 naming it once the wait is over; the record is withdrawn."""
    a = nodes["a"]
    ghost = EtcdClient([etcd.url])
    await ghost.put(NODES + "ghost", json.dumps({"name": "ghost", "stats": {}, "advertised": {}}))
    record = {"vhost": "/", "name": "haunted", "leader": "ghost", "epoch": 1, "type": "stream"}
    await ghost.put(queue_key("/", "haunted"), json.dumps(record))
    try:
        until(lambda: "ghost" in {n["name"] for n in get(a, "/api/nodes")}, "a lists ghost")
        until(lambda: "haunted" in queues(a), "a knows ghost's stream")
        client = await open_client(a)
        try:
            code, ref, _ = await metadata(client, "haunted")
            assert (code, ref) == (STREAM_NOT_AVAILABLE, 0xFFFF)
            with pytest.raises(exceptions.StreamNotAvailable):
                await client.subscribe("haunted", 1)
        finally:
            await client.close()

        # ghost leads one queue; b and c lead more by now (the earlier tests), a the most
        assert fewest({**nodes, "ghost": a}, leaders(a)) == "ghost"
        ch = channel(a)
        arguments = {"x-queue-leader-locator": "balanced"}
        with pytest.raises(ConnectionClosedByBroker) as refused:
            await asyncio.to_thread(
                ch.queue_declare, "for-ghost", durable=True, arguments=arguments
            )
        assert refused.value.reply_code == 541
        assert "cluster node 'ghost' did not create queue 'for-ghost'" in refused.value.reply_text
        assert await ghost.get(queue_key("/", "for-ghost")) is None  # withdrawn
    finally:
        await ghost.delete(queue_key("/", "haunted"))
        await ghost.delete(NODES + "ghost")
        await ghost.close()

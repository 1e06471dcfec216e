"""Commit by majority: three real nodes and a real etcd; aiormq publishes and consumes.

A stream with three members (``x-initial-cluster-size`` 3, led by ``a``) confirms a message
only once a majority (the leader and one replica) holds it, and the leader's readers (an AMQP
consumer, the HTTP message browser) see only such messages. Both replicas SIGSTOPped: no
confirm, nothing new to read; SIGCONT: the confirm and the delivery arrive. One replica
stopped: confirms go on. The same over the Stream protocol (rstream's Producer: no
PublishConfirm; a Subscribe on the leader: no Deliver). A stream with one member confirms
without any replica. (A negative check waits a fixed while: a slow machine can only make
it pass more slowly, never fail it.)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiormq
from rstream import AMQPMessage, schema

from sievemq.streamproto import wire
from sievemq.testing import ServerProcess
from sievemq.testing.stream_client import RawStreamClient, open_client, producer
from sievemq.testing.wait import eventually

from .cluster_helpers import WAIT_S, channel, get, queues, running, stopped, until

Channel = aiormq.abc.AbstractChannel
QUIET_S = 3.0  # how long a held confirm or delivery must stay away
LONG_S = 120  # rstream's send_wait gives up after 5 s unless told otherwise
NAMES = ("a", "b", "c")  # the nodes of this module (conftest.nodes)


def declare(nodes: dict[str, ServerProcess], name: str, size: int) -> None:
    """A stream on ``a`` with ``size`` members, each of them online on ``a``'s listing.

    Waits first until ``a`` sees every node running: an earlier test's SIGSTOP outlasts the
    lease, and a stream declared before a stopped node has registered again is given fewer
    replicas (as RabbitMQ picks a new stream's members among the running nodes)."""
    until(
        lambda: all(running(nodes["a"]).get(n) for n in NAMES),
        f"a sees {', '.join(NAMES)} running",
    )
    arguments = {"x-queue-type": "stream", "x-initial-cluster-size": size}
    channel(nodes["a"]).queue_declare(name, durable=True, arguments=arguments)
    until(
        lambda: len(queues(nodes["a"]).get(name, {}).get("online", [])) == size,
        f"{name} has {size} members online",
    )


class Client:
    """One aiormq connection to ``a``: a confirming publisher and a stream consumer."""

    def __init__(self, connection: aiormq.abc.AbstractConnection) -> None:
        self.connection = connection
        self.got: asyncio.Queue[bytes] = asyncio.Queue()

    async def consume(self, name: str) -> None:
        ch = await self.connection.channel()
        await ch.basic_qos(prefetch_count=100)

        async def on_message(message: aiormq.abc.DeliveredMessage) -> None:
            await self.got.put(message.body)
            await ch.basic_ack(message.delivery_tag)

        await ch.basic_consume(name, on_message, arguments={"x-stream-offset": "first"})


@asynccontextmanager
async def consuming(node: ServerProcess, name: str) -> AsyncIterator[tuple[Client, Channel]]:
    """A client on ``node`` consuming stream ``name`` from first, and a confirming channel."""
    client = Client(await aiormq.connect(node.url))
    try:
        pub = await client.connection.channel(publisher_confirms=True)
        await client.consume(name)
        yield client, pub
    finally:
        await client.connection.close()


def publish(ch: Channel, name: str, body: bytes) -> asyncio.Future[Any]:
    return asyncio.ensure_future(ch.basic_publish(body, routing_key=name))


def browsed(node: ServerProcess, name: str) -> list[str]:
    result = get(node, f"/api/streams/%2F/{name}/messages?offset=first&limit=100")
    return [str(m.get("payload", m.get("body"))) for m in result["messages"]]


async def test_no_confirm_and_nothing_to_read_while_no_replica_holds_it(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    declare(nodes, "majority", 3)
    async with consuming(a, "majority") as (client, pub):
        confirm = await asyncio.wait_for(publish(pub, "majority", b"one"), WAIT_S)
        assert isinstance(confirm, aiormq.spec.Basic.Ack)
        assert await asyncio.wait_for(client.got.get(), WAIT_S) == b"one"

        with stopped(b, c):
            held = publish(pub, "majority", b"two")
            done, _ = await asyncio.wait([held], timeout=QUIET_S)
            assert not done, "confirmed while no replica could hold it"
            assert client.got.empty(), "a consumer on the leader read an uncommitted message"
            assert len(browsed(a, "majority")) == 1  # the HTTP browser neither
        confirm = await asyncio.wait_for(held, WAIT_S)
        assert isinstance(confirm, aiormq.spec.Basic.Ack)
        assert await asyncio.wait_for(client.got.get(), WAIT_S) == b"two"
        assert len(browsed(a, "majority")) == 2


async def test_one_replica_stopped_confirms_go_on(nodes: dict[str, ServerProcess]) -> None:
    a, c = nodes["a"], nodes["c"]
    declare(nodes, "one-down", 3)
    async with consuming(a, "one-down") as (client, pub):
        with stopped(c):
            confirms = [publish(pub, "one-down", f"m{i}".encode()) for i in range(200)]
            for confirm in await asyncio.wait_for(asyncio.gather(*confirms), WAIT_S):
                assert isinstance(confirm, aiormq.spec.Basic.Ack)
            got = [await asyncio.wait_for(client.got.get(), WAIT_S) for _ in range(200)]
            assert got == [f"m{i}".encode() for i in range(200)]


async def test_a_stream_with_one_member_needs_no_replica(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    declare(nodes, "alone", 1)
    async with consuming(a, "alone") as (client, pub):
        with stopped(b, c):
            confirm = await asyncio.wait_for(publish(pub, "alone", b"solo"), WAIT_S)
            assert isinstance(confirm, aiormq.spec.Basic.Ack)
            assert await asyncio.wait_for(client.got.get(), WAIT_S) == b"solo"
            assert len(browsed(a, "alone")) == 1


async def test_stream_protocol_confirms_and_deliveries_wait_for_a_majority(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    declare(nodes, "majority-sp", 3)
    chunks: list[int] = []  # the first offset of each chunk a subscriber on the leader got

    async def on_deliver(frame: schema.Deliver) -> None:
        chunks.append(frame.chunk_first_offset)
        await reader.credit(1, 1)

    reader = await open_client(a)  # Subscribe straight on the leader
    reader.add_handler(schema.Deliver, on_deliver, name="1")  # (rstream: by subscription)
    await reader.run_queue_listener_task(1, on_deliver)
    await reader.subscribe("majority-sp", 1, initial_credit=10)
    async with producer(a) as p:
        await asyncio.wait_for(p.send_wait("majority-sp", AMQPMessage(body=b"one")), WAIT_S)
        await eventually(lambda: chunks == [0], WAIT_S)  # the subscriber gets the first chunk
        with stopped(b, c):
            held = asyncio.ensure_future(
                p.send_wait("majority-sp", AMQPMessage(body=b"two"), timeout=LONG_S)
            )
            done, _ = await asyncio.wait([held], timeout=QUIET_S)
            assert not done, "PublishConfirm while no replica could hold it"
            assert chunks == [0], "a subscriber on the leader got an uncommitted chunk"
        await asyncio.wait_for(held, WAIT_S)
        await eventually(lambda: chunks == [0, 1], WAIT_S)
    await reader.close()


async def test_a_duplicate_is_confirmed_only_once_its_first_copy_is_committed(
    nodes: dict[str, ServerProcess],
) -> None:
    """Dedup (a named Stream-protocol publisher): a publish retried while its first copy
    waits for the majority is a duplicate, and its confirm waits with the first copy's."""
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    declare(nodes, "majority-dedup", 3)

    def message(publishing_id: int) -> AMQPMessage:
        built = AMQPMessage(body=f"id {publishing_id}".encode())
        built.publishing_id = publishing_id  # (the constructor does not take it)
        return built

    async with producer(a) as p:

        def send(publishing_id: int) -> asyncio.Future[Any]:
            return asyncio.ensure_future(
                p.send_wait(
                    "majority-dedup", message(publishing_id), publisher_name="dd", timeout=LONG_S
                )
            )

        await asyncio.wait_for(send(1), WAIT_S)
        with stopped(b, c):
            first = send(2)
            done, _ = await asyncio.wait([first], timeout=QUIET_S / 2)
            assert not done
            retry = send(2)  # the client retries: a duplicate of a held publish
            done, _ = await asyncio.wait([first, retry], timeout=QUIET_S)
            assert not done, "a duplicate confirmed before its first copy was committed"
        await asyncio.wait_for(asyncio.gather(first, retry), WAIT_S)
    assert len(browsed(a, "majority-dedup")) == 2  # stored once


def test_an_acknowledgement_from_a_client_is_refused(nodes: dict[str, ServerProcess]) -> None:
    """Only another node's replica subscription may say what it holds: a user's connection
    that sends ``REPLICA_HOLDS`` is closed with 13 (unknown frame)."""
    raw = RawStreamClient(nodes["a"])
    try:
        assert raw.open() == wire.OK
        raw.send(wire.REPLICA_HOLDS, bytes([0]) + (1).to_bytes(8, "big") + (99).to_bytes(8, "big"))
        key, _, body = raw.read_frame()
        assert key == wire.CLOSE
        assert int.from_bytes(body[4:6], "big") == wire.UNKNOWN_FRAME
    finally:
        raw.close()

"""Single active consumer (ConsumerUpdate) and super streams (CreateSuperStream,
DeleteSuperStream, Route, Partitions) on the stream protocol, with the real rstream client,
and the super stream's exchange and bindings as AMQP 0-9-1 and the admin API see them."""

from __future__ import annotations

import asyncio
import struct
from collections import defaultdict
from typing import Any

import httpx
import pytest
from rstream import (
    AMQPMessage,
    ConsumerOffsetSpecification,
    EventContext,
    MessageContext,
    OffsetSpecification,
    OffsetType,
    Properties,
    RouteType,
    SuperStreamConsumer,
    SuperStreamProducer,
    amqp_decoder,
)
from rstream.exceptions import StreamAlreadyExists, StreamDoesNotExist

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect
from sievemq.testing.stream_client import (
    RawStreamClient,
    consumer,
    from_first,
    open_client,
    producer,
    sac,
    send_confirmed,
    string,
)
from sievemq.testing.wait import eventually

# --------------------------------------------------------------------------- single active consumer


async def test_only_one_consumer_of_a_group_gets_messages_and_the_next_takes_over(
    server: ServerProcess, qname: str
) -> None:
    """The first member is active; on its unsubscribe the next one is activated and starts
    where the ConsumerUpdate answer says (here: the offset the first one stored + 1)."""
    first: list[int] = []
    second: list[int] = []
    updates: list[tuple[str, bool]] = []

    async with producer(server) as p:
        await p.create_stream(qname)
        await send_confirmed(p, qname, [AMQPMessage(body=f"m{i}".encode()) for i in range(10)])

        async with consumer(server) as c1, consumer(server) as c2:

            async def on_first(msg: Any, ctx: MessageContext) -> None:
                first.append(ctx.offset)
                if ctx.offset == 4:
                    await ctx.consumer.store_offset(qname, "grp", 4)

            async def listener_1(active: bool, ctx: EventContext) -> OffsetSpecification:
                updates.append(("c1", active))
                return OffsetSpecification(OffsetType.FIRST, 0)

            async def listener_2(active: bool, ctx: EventContext) -> OffsetSpecification:
                updates.append(("c2", active))
                stored = await ctx.consumer.query_offset(qname, "grp")
                return OffsetSpecification(OffsetType.OFFSET, stored + 1)

            sid1 = await c1.subscribe(
                qname,
                on_first,
                properties=sac("grp"),
                offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
                consumer_update_listener=listener_1,
            )
            await eventually(lambda: len(first) >= 10)
            await c2.subscribe(
                qname,
                lambda msg, ctx: second.append(ctx.offset),
                properties=sac("grp"),
                offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
                consumer_update_listener=listener_2,
            )
            await eventually(lambda: ("c2", False) in updates)  # told it waits
            await send_confirmed(p, qname, [AMQPMessage(body=b"late")])
            await eventually(lambda: len(first) >= 11)
            await asyncio.sleep(0.3)
            assert second == []  # inactive: nothing, even for new messages

            await c1.unsubscribe(sid1)
            await eventually(lambda: ("c2", True) in updates)
            await eventually(lambda: len(second) >= 6)
            await asyncio.sleep(0.2)
    assert first == list(range(11))
    assert updates[0] == ("c1", True)
    assert second == [5, 6, 7, 8, 9, 10]  # from the stored offset 4 + 1, to the end


async def test_answer_offset_replaces_the_subscribe_offset(
    server: ServerProcess, qname: str
) -> None:
    """rstream's own scenario: subscribe at first, answer 'offset 5': delivery starts at 5."""
    got: list[int] = []
    async with producer(server) as p:
        await p.create_stream(qname)
        await send_confirmed(p, qname, [AMQPMessage(body=f"{i}".encode()) for i in range(10)])

    async def listener(active: bool, ctx: EventContext) -> OffsetSpecification:
        return OffsetSpecification(OffsetType.OFFSET, 5)

    async with consumer(server) as c:
        await c.subscribe(
            qname,
            lambda msg, ctx: got.append(ctx.offset),
            properties=sac("answer"),
            offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
            consumer_update_listener=listener,
        )
        await eventually(lambda: len(got) >= 5)
        await asyncio.sleep(0.2)
    assert got == [5, 6, 7, 8, 9]


def test_sac_wire_rules(server: ServerProcess, qname: str) -> None:
    """Raw frames: a SAC subscription without a name is refused with 17; with one, the
    server asks ConsumerUpdate(active=1) and sends nothing before the answer, which may say
    'none' (0) to keep the Subscribe offset; a second member is told active=0."""
    raw = RawStreamClient(server)
    assert raw.open() == 1
    raw.request(13, string(qname) + struct.pack(">i", 0))  # Create
    assert raw.read_frame()[0] == 0x800D

    def subscribe(sid: int, props: dict[str, str]) -> None:
        body = struct.pack(">B", sid) + string(qname) + struct.pack(">HH", 1, 10)
        body += struct.pack(">i", len(props))
        for k, v in props.items():
            body += string(k) + string(v)
        raw.request(7, body)

    subscribe(0, {"single-active-consumer": "true"})
    key, _, body = raw.read_frame()
    assert key == 0x8007 and struct.unpack_from(">H", body, 4)[0] == 17

    subscribe(1, sac("raw"))
    key, _, body = raw.read_frame()
    assert key == 0x8007 and struct.unpack_from(">H", body, 4)[0] == 1
    key, _, body = raw.read_frame()
    assert key == 26  # ConsumerUpdate request
    corr, sid, active = struct.unpack_from(">IBB", body)
    assert (sid, active) == (1, 1)

    subscribe(2, sac("raw"))
    key, _, body = raw.read_frame()
    assert key == 0x8007 and struct.unpack_from(">H", body, 4)[0] == 1
    key, _, body = raw.read_frame()
    assert key == 26
    corr2, sid2, active2 = struct.unpack_from(">IBB", body)
    assert (sid2, active2) == (2, 0)

    # the answer for the active one: type 0 = keep Subscribe's "first" (the stream is empty)
    raw.send(0x801A, struct.pack(">IHH", corr, 1, 0))
    raw.send(0x801A, struct.pack(">IHH", corr2, 1, 3))
    raw.request(27, struct.pack(">i", 0))  # any request: its answer is the next frame
    key, _, _ = raw.read_frame()
    assert key == 0x801B
    raw.sock.close()


async def test_closing_the_active_connection_promotes_the_next(
    server: ServerProcess, qname: str
) -> None:
    """A dropped TCP connection (rstream never sends Close) counts as leaving the group."""
    second: list[int] = []
    async with producer(server) as p:
        await p.create_stream(qname)
        await send_confirmed(p, qname, [AMQPMessage(body=b"x") for _ in range(3)])
    c1 = consumer(server)
    await c1.start()
    await c1.subscribe(qname, lambda m, c: None, properties=sac("drop"))
    async with consumer(server) as c2:
        await c2.subscribe(
            qname,
            lambda m, ctx: second.append(ctx.offset),
            properties=sac("drop"),
            offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
            consumer_update_listener=from_first,
        )
        await asyncio.sleep(0.3)
        assert second == []
        await c1.close()
        await eventually(lambda: len(second) >= 3)
    assert second == [0, 1, 2]


# --------------------------------------------------------------------------- super streams


async def test_create_partitions_route_delete(server: ServerProcess) -> None:
    client = await open_client(server)
    try:
        await client.create_super_stream("orders", ["orders-a", "orders-b"], ["eu", "us"])
        assert await client.partitions("orders") == ["orders-a", "orders-b"]
        assert await client.route("us", "orders") == ["orders-b"]
        assert await client.route("apac", "orders") == []
        assert await client.stream_exists("orders-a")
        with pytest.raises(StreamAlreadyExists):
            await client.create_super_stream("orders", ["orders-c"], ["x"])
        await client.delete_super_stream("orders")
        assert not await client.stream_exists("orders-a")
        assert not await client.stream_exists("orders-b")
        assert await client.partitions("orders") == []  # rstream hides code 2 here
        with pytest.raises(StreamDoesNotExist):
            await client.delete_super_stream("orders")
    finally:
        await client.close()


def test_super_stream_wire_errors(server: ServerProcess) -> None:
    """Keys not one per partition, or a partition that already exists: 17 / 5; nothing made."""
    raw = RawStreamClient(server)
    assert raw.open() == 1

    def create(name: str, parts: list[str], keys: list[str]) -> int:
        body = string(name) + struct.pack(">i", len(parts)) + b"".join(string(p) for p in parts)
        body += struct.pack(">i", len(keys)) + b"".join(string(k) for k in keys)
        body += struct.pack(">i", 0)
        raw.request(29, body)
        key, _, resp = raw.read_frame()
        assert key == 0x801D
        return int(struct.unpack_from(">H", resp, 4)[0])

    assert create("bad", ["bad-0", "bad-1"], ["k"]) == 17
    assert create("amq.bad", ["x-0"], ["k"]) == 17
    raw.request(13, string("taken-0") + struct.pack(">i", 0))
    raw.read_frame()
    assert create("taken", ["taken-0"], ["k"]) == 5
    raw.request(25, string("taken"))  # Partitions: no exchange was left behind
    key, _, resp = raw.read_frame()
    assert key == 0x8019 and struct.unpack_from(">H", resp, 4)[0] == 2
    raw.sock.close()


async def test_super_stream_is_an_exchange_with_bindings_over_amqp(server: ServerProcess) -> None:
    """As RabbitMQ builds it: a durable direct exchange with x-super-stream=true, partitions
    bound with their binding key and x-stream-partition-order; an AMQP publish with a
    binding key lands in that partition, and a stream consumer reads it there."""
    client = await open_client(server)
    try:
        await client.create_super_stream("inv", ["inv-0", "inv-1", "inv-2"], ["a", "b", "c"])
        admin = httpx.Client(base_url=server.admin_url, auth=("guest", "guest"))
        exchange = admin.get("/api/exchanges/%2F/inv").json()
        assert exchange["type"] == "direct" and exchange["durable"] is True
        assert exchange["arguments"] == {"x-super-stream": True}
        bindings = admin.get("/api/exchanges/%2F/inv/bindings/source").json()
        found = sorted(
            (b["routing_key"], b["destination"], b["arguments"]["x-stream-partition-order"])
            for b in bindings
        )
        assert found == [("a", "inv-0", 0), ("b", "inv-1", 1), ("c", "inv-2", 2)]

        conn = connect(server)
        ch = conn.channel()
        ch.exchange_declare("inv", passive=True)
        ch.confirm_delivery()
        ch.basic_publish("inv", "b", b"via amqp")
        conn.close()
        got: list[bytes] = []
        async with consumer(server) as c:
            await c.subscribe(
                "inv-1",
                lambda msg, ctx: got.append(bytes(msg.body)),
                decoder=amqp_decoder,
                offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
            )
            await eventually(lambda: len(got) >= 1)
        assert got == [b"via amqp"]
        await client.delete_super_stream("inv")
        assert admin.get("/api/exchanges/%2F/inv").status_code == 404
    finally:
        await client.close()


async def test_super_stream_producer_and_sac_consumers_split_the_partitions(
    server: ServerProcess,
) -> None:
    """rstream's SuperStreamProducer routes by hash; three SAC consumers of one group get one
    partition each (partition index mod group size); a fourth would wait."""
    ss = "split"
    client = await open_client(server)
    await client.create_super_stream(ss, [f"{ss}-{i}" for i in range(3)], ["0", "1", "2"])
    received: list[list[str]] = [[], [], []]
    consumers = []
    try:
        for i in range(3):
            sc = SuperStreamConsumer(
                server.host, server.stream_port, username="guest", password="guest", super_stream=ss
            )
            await sc.start()
            consumers.append(sc)
            props: dict[str, str] = defaultdict(str)
            props.update(sac("g") | {"super-stream": ss})
            await sc.subscribe(
                callback=lambda m, ctx, got=received[i]: got.append(ctx.stream),
                decoder=amqp_decoder,
                properties=props,
                consumer_update_listener=from_first,
            )

        async def by_id(msg: AMQPMessage) -> str:
            return str(msg.properties.message_id)

        async with SuperStreamProducer(
            server.host,
            server.stream_port,
            username="guest",
            password="guest",
            super_stream=ss,
            routing=RouteType.Hash,
            routing_extractor=by_id,
        ) as sp:
            for n in range(300):
                await sp.send(AMQPMessage(body=b"x", properties=Properties(message_id=str(n))))
        await eventually(lambda: sum(len(r) for r in received) >= 300, timeout=20)
        streams = [set(r) for r in received]
        assert all(len(s) == 1 for s in streams)  # each consumer: one partition
        assert set().union(*streams) == {f"{ss}-{i}" for i in range(3)}
    finally:
        for sc in consumers:
            await sc.close()
        await client.delete_super_stream(ss)
        await client.close()

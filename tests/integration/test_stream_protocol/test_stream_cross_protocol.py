"""Publish over one protocol, consume over the other: RabbitMQ's AMQP 0-9-1 <-> AMQP 1.0
conversion rules (docs/compatibility.md "Stream protocol"), and one filter value for both."""

from __future__ import annotations

import uuid

import pika
from rstream import (
    AMQPMessage,
    ConsumerOffsetSpecification,
    FilterConfiguration,
    MessageContext,
    OffsetType,
    amqp_decoder,
)
from rstream._pyamqp.message import Header, Properties

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect
from sievemq.testing.stream_client import consumer, producer
from sievemq.testing.wait import eventually


def _declare(server: ServerProcess, name: str) -> None:
    conn = connect(server)
    try:
        conn.channel().queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    finally:
        conn.close()


def _publish_091(
    server: ServerProcess, name: str, messages: list[tuple[pika.BasicProperties, bytes]]
) -> None:
    conn = connect(server)
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        for props, body in messages:
            ch.basic_publish("", name, body, props)
    finally:
        conn.close()


def _consume_091(
    server: ServerProcess, name: str, count: int, arguments: dict[str, object] | None = None
) -> list[tuple[pika.spec.Basic.Deliver, pika.BasicProperties, bytes]]:
    conn = connect(server)
    out = []
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=1000)
        args = {"x-stream-offset": "first", **(arguments or {})}
        for method, props, body in ch.consume(name, arguments=args, inactivity_timeout=2.0):
            if method is None:
                break
            out.append((method, props, body))
            ch.basic_ack(method.delivery_tag)
            if len(out) >= count:
                break
    finally:
        conn.close()
    return out


async def _consume_stream(
    server: ServerProcess, name: str, count: int, **kwargs: object
) -> list[tuple[int, AMQPMessage]]:
    got: list[tuple[int, AMQPMessage]] = []

    async def on_message(msg: AMQPMessage, ctx: MessageContext) -> None:
        got.append((ctx.offset, msg))

    kwargs.setdefault("decoder", amqp_decoder)
    async with consumer(server) as c:
        await c.subscribe(
            name,
            on_message,
            offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
            **kwargs,  # type: ignore[arg-type]
        )
        await eventually(lambda: len(got) >= count)
    return got


async def test_amqp091_publish_arrives_as_amqp10_on_the_stream_protocol(
    server: ServerProcess, qname: str
) -> None:
    _declare(server, qname)
    corr = uuid.uuid4()
    props = pika.BasicProperties(
        content_type="application/json",
        content_encoding="utf-8",
        delivery_mode=2,
        priority=4,
        expiration="60000",
        message_id="m-1",
        correlation_id=f"urn:uuid:{corr}",
        reply_to="replies",
        timestamp=1_700_000_000,
        type="order.created",
        user_id="guest",
        app_id="shop",
        headers={"region": "emea", "n": 42, "x-stream-filter-value": "emea", "nested": {"a": 1}},
    )
    _publish_091(server, qname, [(props, b'{"id": 1}')])
    [(offset, msg)] = await _consume_stream(server, qname, 1)
    assert offset == 0
    assert msg.body == b'{"id": 1}'
    header = msg.header
    assert header is not None and header.durable is True and header.priority == 4
    assert header.ttl == 60000
    p = msg.properties
    assert p is not None
    assert p.message_id == b"m-1"
    assert p.correlation_id == corr  # urn:uuid: becomes an AMQP 1.0 uuid
    assert p.reply_to == b"/queues/replies"
    assert p.content_type == b"application/json"
    assert p.content_encoding == b"utf-8"
    assert p.user_id == b"guest"
    assert p.creation_time == 1_700_000_000_000  # seconds -> milliseconds
    assert p.group_id == b"shop"
    ann = {k.decode() if isinstance(k, bytes) else k: v for k, v in msg.message_annotations.items()}
    assert ann["x-exchange"] == b""
    assert ann["x-routing-key"] == qname.encode()
    assert ann["x-stream-filter-value"] == b"emea"
    assert ann["x-basic-type"] == b"order.created"
    app = {
        k.decode() if isinstance(k, bytes) else k: v for k, v in msg.application_properties.items()
    }
    assert app == {"region": b"emea", "n": 42}  # the table header is dropped, as RabbitMQ


async def test_stream_publish_arrives_converted_on_amqp091(
    server: ServerProcess, qname: str
) -> None:
    mid = uuid.uuid4()
    async with producer(server) as p:
        await p.create_stream(qname)
        await p.send_wait(
            qname,
            AMQPMessage(
                body=b"payload",
                header=Header(durable=True, priority=7, ttl=5000),
                properties=Properties(
                    message_id=mid,
                    correlation_id="c-9",
                    reply_to="/queues/my%2Freplies",
                    content_type="text/plain",
                    creation_time=1_700_000_000_123,
                    group_id="billing",
                    subject="dropped",
                ),
                application_properties={"region": "apac", "count": 3},
                message_annotations={"x-opt-note": "kept", "x-basic-type": "invoice"},
            ),
        )
        await p.send_wait(qname, b"not amqp 1.0")
    [(m1, p1, b1), (m2, p2, b2)] = _consume_091(server, qname, 2)
    assert (m2.exchange, m2.routing_key) == ("", qname)
    assert b1 == b"payload"
    assert (m1.exchange, m1.routing_key) == ("", qname)
    assert p1.delivery_mode == 2 and p1.priority == 7 and p1.expiration == "5000"
    assert p1.message_id == f"urn:uuid:{mid}"
    assert p1.correlation_id == "c-9"
    assert p1.reply_to == "my/replies"
    assert p1.content_type == "text/plain"
    assert p1.timestamp == 1_700_000_000
    assert p1.app_id == "billing"
    assert p1.type == "invoice"
    assert p1.headers["region"] == b"apac" or p1.headers["region"] == "apac"
    assert p1.headers["count"] == 3
    assert p1.headers["x-opt-note"] in ("kept", b"kept")
    assert p1.headers["x-stream-offset"] == 0
    assert "subject" not in p1.headers
    # a payload that is not AMQP 1.0 arrives as is, without properties
    assert b2 == b"not amqp 1.0"
    assert set(p2.headers) == {"x-stream-offset"}


async def test_round_trip_091_stream_091_keeps_what_the_rules_keep(
    server: ServerProcess, qname: str
) -> None:
    _declare(server, qname)
    props = pika.BasicProperties(
        content_type="text/plain",
        delivery_mode=2,
        message_id="m-7",
        correlation_id="c-7",
        timestamp=1_700_000_001,
        app_id="app",
        type="t",
        headers={"k": "v", "x-custom": "x"},
    )
    _publish_091(server, qname, [(props, b"body-1")])
    [(_offset, raw)] = await _consume_stream(server, qname, 1, decoder=None)
    assert isinstance(raw, bytes)  # the AMQP 1.0 encoding as delivered
    other = f"{qname}-copy"
    async with producer(server) as p:  # re-publish those bytes unchanged
        await p.create_stream(other)
        await p.send_wait(other, raw)
    [(method, back, body)] = _consume_091(server, other, 1)
    assert body == b"body-1"
    assert (method.exchange, method.routing_key) == ("", qname)  # from x-exchange/x-routing-key
    assert back.content_type == "text/plain" and back.delivery_mode == 2
    assert (back.message_id, back.correlation_id) == ("m-7", "c-7")
    assert back.timestamp == 1_700_000_001 and back.app_id == "app" and back.type == "t"
    assert back.headers["k"] in ("v", b"v") and back.headers["x-custom"] in ("x", b"x")


async def test_one_filter_value_across_protocols(server: ServerProcess, qname: str) -> None:
    async def extract(msg: AMQPMessage) -> str:
        return str(msg.application_properties["region"])  # type: ignore[index]

    _declare(server, qname)
    _publish_091(
        server,
        qname,
        [
            (pika.BasicProperties(headers={"x-stream-filter-value": r}), f"091-{r}".encode())
            for r in ("emea", "amer", "apac")
        ],
    )
    async with producer(server, filter_value_extractor=extract) as p:
        await p.send_batch(
            qname,
            [
                AMQPMessage(body=f"s-{r}".encode(), application_properties={"region": r})
                for r in ("amer", "emea")
            ],
        )
    # a stream subscriber filtering on emea gets the 0-9-1 and the stream-published one
    got = await _consume_stream(
        server,
        qname,
        2,
        filter_input=FilterConfiguration(values_to_filter=["emea"], predicate=lambda m: True),
    )
    assert sorted(bytes(m.body) for _, m in got) == [b"091-emea", b"s-emea"]
    # a 0-9-1 consumer with x-stream-filter gets both too, and sees the value as a header
    delivered = _consume_091(server, qname, 2, {"x-stream-filter": "emea"})
    assert sorted(b for _, _, b in delivered) == [b"091-emea", b"s-emea"]
    assert {p.headers["x-stream-filter-value"] for _, p, _ in delivered} <= {"emea", b"emea"}


async def test_admin_api_shows_stream_records_as_amqp091(server: ServerProcess, qname: str) -> None:
    from sievemq.testing.admin_client import client, q

    async with producer(server) as p:
        await p.create_stream(qname)
        await p.send_wait(
            qname,
            AMQPMessage(body=b"hello", properties=Properties(content_type="text/plain")),
        )
    with client(server) as http:
        answer = http.get(f"/api/streams/%2F/{q(qname)}/messages").json()
    [message] = answer["messages"]
    assert message["payload"] == "hello"  # the data section, not the AMQP 1.0 bytes
    assert message["properties"]["content_type"] == "text/plain"

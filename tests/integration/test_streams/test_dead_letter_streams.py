"""Dead-lettering into a stream: a classic or quorum queue's dead-letter exchange may route to
a stream (as RabbitMQ allows). The record is the one a publish of the dead-letter makes: its
properties with the ``x-death`` headers, the dead-letter exchange and routing key, filter
values indexed; stream consumers read it like any other message, also after a restart.
"""

from __future__ import annotations

import time
from typing import Any

import pika
from pika.adapters.blocking_connection import BlockingChannel

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect

Delivery = tuple[Any, pika.BasicProperties, bytes]


def read_stream(
    ch: BlockingChannel, stream: str, want: int, arguments: dict[str, Any] | None = None
) -> list[Delivery]:
    """Consume ``stream`` from its first offset until ``want`` messages came (or 15 s)."""
    got: list[Delivery] = []
    ch.basic_qos(prefetch_count=100)
    tag = ch.basic_consume(
        stream,
        lambda c, m, p, b: got.append((m, p, b)),
        arguments={"x-stream-offset": "first", **(arguments or {})},
    )
    deadline = time.monotonic() + 15  # ends as soon as the wait is over
    while len(got) < want and time.monotonic() < deadline:
        ch.connection.process_data_events(time_limit=0.1)
    ch.connection.process_data_events(time_limit=0.3)  # nothing more may come
    ch.basic_cancel(tag)
    return got


def declare_dlx_to_stream(ch: BlockingChannel, name: str, **queue_args: Any) -> str:
    """A direct DLX bound to stream ``name + '.s'``; the source queue ``name`` uses it."""
    stream = name + ".s"
    ch.exchange_declare(name + ".dlx", "direct")
    ch.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    ch.queue_bind(stream, name + ".dlx", routing_key="dead")
    ch.queue_declare(
        name,
        durable=True,
        arguments={
            "x-dead-letter-exchange": name + ".dlx",
            "x-dead-letter-routing-key": "dead",
            **queue_args,
        },
    )
    return stream


def test_rejected_and_expired_messages_land_in_the_stream_with_x_death(
    server: ServerProcess, qname: str
) -> None:
    conn = connect(server)
    ch = conn.channel()
    stream = declare_dlx_to_stream(ch, qname, **{"x-message-ttl": 150})
    ch.confirm_delivery()
    props = pika.BasicProperties(
        content_type="text/plain", headers={"app": "orders"}, delivery_mode=2
    )
    ch.basic_publish("", qname, b"rejected", props)
    method, _, _ = ch.basic_get(qname)
    assert method is not None
    ch.basic_reject(method.delivery_tag, requeue=False)
    ch.basic_publish("", qname, b"expired", pika.BasicProperties(expiration="50"))
    time.sleep(0.5)

    got = read_stream(ch, stream, 2)
    assert [b for _, _, b in got] == [b"rejected", b"expired"]
    (m0, p0, _), (m1, p1, _) = got
    # delivered from the stream as the dead-letter exchange published them
    assert (m0.exchange, m0.routing_key) == (qname + ".dlx", "dead")
    assert (m1.exchange, m1.routing_key) == (qname + ".dlx", "dead")
    assert [p0.headers["x-stream-offset"], p1.headers["x-stream-offset"]] == [0, 1]
    assert p0.content_type == "text/plain" and p0.headers["app"] == "orders"
    death = p0.headers["x-death"][0]
    assert death["reason"] == "rejected" and death["queue"] == qname and death["count"] == 1
    assert death["exchange"] == "" and death["routing-keys"] == [qname]
    assert p0.headers["x-first-death-reason"] == "rejected"
    assert p0.headers["x-first-death-queue"] == qname
    expired = p1.headers["x-death"][0]
    assert expired["reason"] == "expired" and expired["original-expiration"] == "50"
    assert p1.expiration is None  # moved into x-death, as RabbitMQ does
    # the source queue is empty: the messages moved, they were not copied
    assert ch.queue_declare(qname, passive=True).method.message_count == 0
    for name in (qname, stream):
        ch.queue_delete(name)
    ch.exchange_delete(qname + ".dlx")
    conn.close()


def test_quorum_delivery_limit_dead_letters_into_a_filtered_stream(
    server: ServerProcess, qname: str
) -> None:
    """A quorum queue's delivery-limit dead-letter keeps its x-stream-filter-value: the
    stream indexes it, and a filtered consumer gets exactly that message."""
    conn = connect(server)
    ch = conn.channel()
    stream = declare_dlx_to_stream(ch, qname, **{"x-queue-type": "quorum", "x-delivery-limit": 1})
    ch.confirm_delivery()
    ch.basic_publish(
        "", qname, b"red", pika.BasicProperties(headers={"x-stream-filter-value": "red"})
    )
    ch.basic_publish(
        "", qname, b"blue", pika.BasicProperties(headers={"x-stream-filter-value": "blue"})
    )
    for _ in range(4):  # two deliveries each: the second requeue passes the limit of 1
        method, _, _ = ch.basic_get(qname)
        if method is None:
            break
        ch.basic_nack(method.delivery_tag, requeue=True)
    time.sleep(0.2)
    everything = read_stream(ch, stream, 2)
    assert sorted(b for _, _, b in everything) == [b"blue", b"red"]
    assert {p.headers["x-death"][0]["reason"] for _, p, _ in everything} == {"delivery_limit"}

    red = read_stream(ch, stream, 1, {"x-stream-filter": "red"})
    assert [b for _, _, b in red] == [b"red"]
    assert red[0][1].headers["x-stream-filter-value"] == "red"
    for name in (qname, stream):
        ch.queue_delete(name)
    ch.exchange_delete(qname + ".dlx")
    conn.close()


def test_dead_letters_in_a_stream_survive_a_restart(fresh_server: ServerProcess) -> None:
    conn = connect(fresh_server)
    ch = conn.channel()
    stream = declare_dlx_to_stream(ch, "orders")
    ch.confirm_delivery()
    for i in range(3):
        ch.basic_publish("", "orders", b"m%d" % i, pika.BasicProperties(delivery_mode=2))
    for _ in range(3):
        method, _, _ = ch.basic_get("orders")
        assert method is not None
        ch.basic_reject(method.delivery_tag, requeue=False)
    assert [b for _, _, b in read_stream(ch, stream, 3)] == [b"m0", b"m1", b"m2"]
    conn.close()
    assert fresh_server.stop() == 0
    fresh_server.restart()

    conn = connect(fresh_server)
    ch = conn.channel()
    got = read_stream(ch, stream, 3)
    assert [b for _, _, b in got] == [b"m0", b"m1", b"m2"]
    assert all(p.headers["x-death"][0]["queue"] == "orders" for _, p, _ in got)
    conn.close()

"""queue.delete cancels consumers; durable definitions survive restarts."""

from __future__ import annotations

import time
from typing import Any

import pika
import pika.exceptions
import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect

pytestmark = pytest.mark.timeout(60)

STREAM = {"x-queue-type": "stream"}


def wait_for(conn: pika.BlockingConnection, cond: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.05)


def consume_all(
    server: ServerProcess, queue: str, quiet: float = 0.5
) -> list[tuple[Any, Any, bytes]]:
    """Every message of the stream from the first, with (method, properties, body)."""
    conn = connect(server)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=100)
    got = []
    for method, props, body in ch.consume(
        queue, arguments={"x-stream-offset": "first"}, inactivity_timeout=quiet
    ):
        if method is None:
            break
        got.append((method, props, body))
        ch.basic_ack(method.delivery_tag)
    conn.close()
    return got


def test_delete_cancels_consumers_and_redeclare_is_empty(server: ServerProcess, qname: str) -> None:
    conn = connect(server)
    pub = conn.channel()
    pub.confirm_delivery()
    pub.queue_declare(qname, durable=True, arguments=STREAM)
    for i in range(3):
        pub.basic_publish("", qname, f"old-{i}".encode())

    consumers = []
    cancelled: list[Any] = []
    received: list[bytes] = []
    for _ in range(2):
        ch = conn.channel()
        ch.basic_qos(prefetch_count=10)
        ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))

        def on_message(c: Any, method: Any, _props: Any, body: bytes) -> None:
            received.append(body)
            c.basic_ack(method.delivery_tag)

        tag = ch.basic_consume(qname, on_message, arguments={"x-stream-offset": "first"})
        consumers.append((ch, tag))
    wait_for(conn, lambda: len(received) == 6)
    assert sorted(received) == sorted([f"old-{i}".encode() for i in range(3)] * 2)

    other = connect(server)
    other.channel().queue_delete(qname)
    other.close()

    wait_for(conn, lambda: len(cancelled) == 2)
    assert sorted(cancelled) == sorted(tag for _ch, tag in consumers)
    assert all(ch.is_open for ch, _tag in consumers), "basic.cancel must not close the channel"

    check = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        check.queue_declare(qname, passive=True)
    assert info.value.reply_code == 404

    ok = conn.channel().queue_declare(qname, durable=True, arguments=STREAM)
    assert ok.method.message_count == 0
    assert consume_all(server, qname, quiet=0.3) == []
    pub = conn.channel()
    pub.confirm_delivery()
    pub.basic_publish("", qname, b"new")
    got = consume_all(server, qname, quiet=0.3)
    assert [body for _m, _p, body in got] == [b"new"]
    assert got[0][1].headers["x-stream-offset"] == 0
    conn.close()


def test_delete_missing_queue_is_ok(server: ServerProcess, qname: str) -> None:
    conn = connect(server)
    conn.channel().queue_delete(qname)  # RabbitMQ: deleting what is not there succeeds
    conn.close()


def declare_topology(ch: Any, q: str) -> None:
    ch.exchange_declare(f"{q}.topic", "topic", durable=True)
    ch.exchange_declare(f"{q}.fanout", "fanout", durable=True)
    ch.exchange_declare(f"{q}.transient", "direct", durable=False)
    ch.queue_declare(q, durable=True, arguments={**STREAM, "x-max-age": "7D"})
    ch.queue_bind(q, f"{q}.topic", "a.#")
    ch.exchange_bind(destination=f"{q}.topic", source=f"{q}.fanout", routing_key="")


def publish(ch: Any, exchange: str, rk: str, bodies: list[str]) -> None:
    for body in bodies:
        ch.basic_publish(
            exchange,
            rk,
            body.encode(),
            pika.BasicProperties(headers={"body": body, "arr": [1, {"t": body}]}, delivery_mode=2),
            mandatory=True,
        )


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_durable_definitions_and_messages_survive_restart(
    fresh_server: ServerProcess, qname: str, how: str
) -> None:
    conn = connect(fresh_server)
    ch = conn.channel()
    ch.confirm_delivery()
    declare_topology(ch, qname)
    publish(ch, f"{qname}.topic", "a.b", [f"before-{i}" for i in range(5)])
    conn.close()

    if how == "sigterm":
        assert fresh_server.stop() == 0
    else:
        fresh_server.kill()
    fresh_server.restart()

    conn = connect(fresh_server)
    ch = conn.channel()
    ch.exchange_declare(f"{qname}.topic", "topic", passive=True)
    ch.exchange_declare(f"{qname}.fanout", "fanout", passive=True)
    ok = ch.queue_declare(qname, passive=True)
    assert ok.method.message_count == 5
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.exchange_declare(f"{qname}.transient", "direct", passive=True)
    assert info.value.reply_code == 404

    # the stream's arguments survived: a different x-max-age is still inequivalent
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(qname, durable=True, arguments={**STREAM, "x-max-age": "1D"})
    assert info.value.reply_code == 406
    assert "inequivalent arg 'x-max-age'" in info.value.reply_text

    # the queue binding and the exchange-to-exchange binding survived
    ch = conn.channel()
    ch.confirm_delivery()
    publish(ch, f"{qname}.fanout", "a.c", ["after-0"])
    publish(ch, f"{qname}.topic", "a.d.e", ["after-1"])
    with pytest.raises(pika.exceptions.UnroutableError):
        publish(ch, f"{qname}.topic", "z", ["unroutable"])
    conn.close()

    got = consume_all(fresh_server, qname)
    bodies = [body.decode() for _m, _p, body in got]
    assert bodies == [f"before-{i}" for i in range(5)] + ["after-0", "after-1"]
    for _method, props, body in got:
        assert props.headers["body"] == body.decode()
        assert props.headers["arr"] == [1, {"t": body.decode()}]
        assert props.delivery_mode == 2
    assert [props.headers["x-stream-offset"] for _m, props, _b in got] == list(range(7))
    assert [m.routing_key for m, _p, _b in got] == ["a.b"] * 5 + ["a.c", "a.d.e"]
    assert [m.exchange for m, _p, _b in got] == [f"{qname}.topic"] * 5 + [
        f"{qname}.fanout",
        f"{qname}.topic",
    ]

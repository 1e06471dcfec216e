"""Direct reply-to (``amq.rabbitmq.reply-to``) with pika, aio-pika, aiormq and amqplib.

What RabbitMQ 3.10.8 answers was taken side by side with the same pika calls (see
docs/compatibility.md): the declare-ok counts, the 406 texts, the 404 of a retired name. One
deliberate difference is checked here too: a mandatory reply that reached its consumer is
not also returned (RabbitMQ 3.10.8 returns it as NO_ROUTE although it delivered it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aio_pika
import aiormq
import aiormq.abc
import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect

from ..node_scenarios import run_node

pytestmark = pytest.mark.timeout(60)

RT = "amq.rabbitmq.reply-to"


@pytest.fixture
def conn(server: ServerProcess) -> Iterator[BlockingConnection]:
    c = connect(server)
    yield c
    if c.is_open:
        c.close()


def _get(ch: BlockingChannel, queue: str) -> tuple[Any, bytes]:
    """basic.get until the message is there (the publish went out on another connection)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is not None:
            return props, body
        ch.connection.process_data_events(time_limit=0.05)
    raise AssertionError(f"nothing arrived in {queue}")


def _requester(conn: BlockingConnection) -> tuple[BlockingChannel, list[tuple[Any, Any, bytes]]]:
    ch = conn.channel()
    got: list[tuple[Any, Any, bytes]] = []
    ch.basic_consume(RT, lambda c, m, p, b: got.append((m, p, b)), auto_ack=True)
    return ch, got


def _wait(conn: BlockingConnection, got: list[Any], n: int) -> None:
    deadline = time.monotonic() + 10
    while len(got) < n and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.05)
    assert len(got) >= n, got


def test_pika_rpc_round_trip(server: ServerProcess, conn: BlockingConnection) -> None:
    requests = conn.channel().queue_declare("", exclusive=True).method.queue
    ch, got = _requester(conn)
    ch.basic_publish("", requests, b"2+2", pika.BasicProperties(reply_to=RT, correlation_id="c1"))
    responder = connect(server)
    try:
        rch = responder.channel()
        props, request = _get(conn.channel(), requests)
        assert request == b"2+2"
        name = props.reply_to
        assert name.startswith(RT + ".") and name != RT + "."
        assert props.correlation_id == "c1"
        ok = rch.queue_declare(name, passive=True).method  # a live name declares ok
        assert (ok.queue, ok.message_count, ok.consumer_count) == (name, 0, 1)
        rch.confirm_delivery()  # a delivered mandatory reply is confirmed, not returned
        rch.basic_publish("", name, b"4", pika.BasicProperties(correlation_id="c1"), mandatory=True)
        _wait(conn, got, 1)
        method, reply_props, reply = got[0]
        assert reply == b"4" and reply_props.correlation_id == "c1"
        assert (method.exchange, method.routing_key, method.redelivered) == ("", name, False)
        # only the default exchange routes to a reply name
        rch.basic_publish("amq.direct", name, b"not for you")
        rch.basic_publish("", name, b"second")
        _wait(conn, got, 2)
        assert [b for _, _, b in got] == [b"4", b"second"]
    finally:
        responder.close()


def test_each_channel_gets_its_own_name(conn: BlockingConnection) -> None:
    requests = conn.channel().queue_declare("", exclusive=True).method.queue
    names = []
    for _ in range(2):
        ch, _got = _requester(conn)
        ch.basic_publish("", requests, b"q", pika.BasicProperties(reply_to=RT))
        names.append(_get(conn.channel(), requests)[0].reply_to)
    assert names[0] != names[1]
    # the key part is random: two names share no more than the prefix and the channel part
    assert names[0].rsplit(".", 1)[1] != names[1].rsplit(".", 1)[1]


@pytest.mark.parametrize("passive", [True, False])
def test_declare_pseudo_queue(conn: BlockingConnection, passive: bool) -> None:
    ok = conn.channel().queue_declare(RT, passive=passive, durable=not passive).method
    assert (ok.queue, ok.message_count, ok.consumer_count) == (RT, 0, 1)  # RabbitMQ's counts


def _closed_with(conn: BlockingConnection, action: Any) -> tuple[int, str]:
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        action(ch)
        ch.queue_declare("", exclusive=True)  # a round trip: the close arrives first
    return info.value.reply_code, info.value.reply_text


def test_rules_and_their_reply_codes(conn: BlockingConnection) -> None:
    def consume(ch: BlockingChannel, auto_ack: bool = True) -> None:
        ch.basic_consume(RT, lambda *a: None, auto_ack=auto_ack)

    def twice(ch: BlockingChannel) -> None:
        consume(ch)
        consume(ch)

    def publish_first(ch: BlockingChannel) -> None:
        ch.basic_publish("", "nowhere", b"x", pika.BasicProperties(reply_to=RT))

    assert _closed_with(conn, lambda ch: consume(ch, auto_ack=False)) == (
        406,
        "PRECONDITION_FAILED - reply consumer cannot acknowledge",
    )
    assert _closed_with(conn, twice) == (406, "PRECONDITION_FAILED - reply consumer already set")
    assert _closed_with(conn, publish_first) == (
        406,
        "PRECONDITION_FAILED - fast reply consumer does not exist",
    )
    unknown = RT + ".bm90LW91cnM.key"
    assert _closed_with(conn, lambda ch: ch.queue_declare(unknown, passive=True)) == (
        404,
        f"NOT_FOUND - no queue '{unknown}' in vhost '/'",
    )


def test_other_reply_to_values_are_kept(conn: BlockingConnection) -> None:
    """Only a reply-to of exactly the pseudo-queue is rewritten (and needs a consumer)."""
    requests = conn.channel().queue_declare("", exclusive=True).method.queue
    ch = conn.channel()
    for value in (RT + ".someone", RT + "x", "my-replies"):
        ch.basic_publish("", requests, b"q", pika.BasicProperties(reply_to=value))
        assert _get(ch, requests)[0].reply_to == value
    # the name in a header, not in reply-to: stored as sent, no consumer needed
    ch.basic_publish("", requests, b"q", pika.BasicProperties(headers={"note": RT}))
    assert _get(ch, requests)[0].headers == {"note": RT}


def test_reply_in_a_transaction(conn: BlockingConnection) -> None:
    requests = conn.channel().queue_declare("", exclusive=True).method.queue
    ch, got = _requester(conn)
    ch.tx_select()
    ch.basic_publish("", requests, b"q", pika.BasicProperties(reply_to=RT))
    ch.tx_commit()
    tx = conn.channel()
    tx.tx_select()
    tx.basic_publish("", _get(tx, requests)[0].reply_to, b"reply")
    conn.process_data_events(time_limit=0.1)
    assert got == []  # held until the commit
    tx.tx_commit()
    _wait(conn, got, 1)


@pytest.mark.parametrize("gone", ["cancel", "channel closed", "connection closed"])
def test_replies_to_a_gone_consumer_are_returned(server: ServerProcess, gone: str) -> None:
    requester = connect(server)
    requests = requester.channel().queue_declare("", exclusive=False, auto_delete=False)
    queue = requests.method.queue
    ch, _got = _requester(requester)
    ch.basic_publish("", queue, b"q", pika.BasicProperties(reply_to=RT))
    name = _get(requester.channel(), queue)[0].reply_to
    if gone == "cancel":
        for tag in list(ch.consumer_tags):
            ch.basic_cancel(tag)
    elif gone == "channel closed":
        ch.close()
    responder = connect(server)
    try:
        if gone == "connection closed":
            requester.close()
        rch = responder.channel()
        rch.confirm_delivery()
        with pytest.raises(pika.exceptions.UnroutableError):
            rch.basic_publish("", name, b"late", mandatory=True)
        rch.basic_publish("", name, b"late, dropped")  # confirmed (ack), stored nowhere
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            rch.queue_declare(name, passive=True)
        assert info.value.reply_code == 404
        responder.channel().queue_delete(queue)
    finally:
        responder.close()
        if requester.is_open:
            requester.close()


async def test_aio_pika_rpc(server: ServerProcess) -> None:
    """aio-pika publishes with mandatory=True and confirms by default: the reply is neither
    returned nor refused."""
    async with await aio_pika.connect(server.url) as connection:
        requester = await connection.channel()
        replies: asyncio.Queue[aio_pika.abc.AbstractIncomingMessage] = asyncio.Queue()
        pseudo = await requester.declare_queue(RT, passive=True)
        await pseudo.consume(replies.put, no_ack=True)
        responder = await connection.channel()
        requests = await responder.declare_queue("", exclusive=True)

        async def serve(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            async with message.process():
                assert message.reply_to is not None
                await responder.default_exchange.publish(
                    aio_pika.Message(
                        str(int(message.body) * 2).encode(),
                        correlation_id=message.correlation_id,
                    ),
                    routing_key=message.reply_to,
                )

        await requests.consume(serve)
        for i in range(5):
            await requester.default_exchange.publish(
                aio_pika.Message(str(i).encode(), reply_to=RT, correlation_id=str(i)),
                routing_key=requests.name,
            )
        answers = [await asyncio.wait_for(replies.get(), 10) for _ in range(5)]
        assert {(m.correlation_id, m.body) for m in answers} == {
            (str(i), str(i * 2).encode()) for i in range(5)
        }


async def test_aiormq_rpc_and_errors(server: ServerProcess) -> None:
    connection = await aiormq.connect(server.url)
    try:
        ch = await connection.channel()
        with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed) as info:
            await ch.basic_consume(RT, lambda m: None, no_ack=False)
        assert "reply consumer cannot acknowledge" in str(info.value)
        ch = await connection.channel()
        got: asyncio.Queue[aiormq.abc.DeliveredMessage] = asyncio.Queue()
        await ch.basic_consume(RT, got.put, no_ack=True)
        responder = await connection.channel()
        requests = (await responder.queue_declare("", exclusive=True)).queue
        assert requests is not None
        await ch.basic_publish(
            b"ping",
            routing_key=requests,
            properties=aiormq.spec.Basic.Properties(reply_to=RT),
        )
        request = None
        for _ in range(200):
            request = await responder.basic_get(requests, no_ack=True)
            if isinstance(request.delivery, aiormq.spec.Basic.GetOk):
                break
            await asyncio.sleep(0.05)
        assert request is not None
        name = request.header.properties.reply_to
        assert name is not None and name.startswith(RT + ".")
        confirm = await responder.basic_publish(b"pong", routing_key=name, mandatory=True)
        assert isinstance(confirm, aiormq.spec.Basic.Ack)
        reply = await asyncio.wait_for(got.get(), 10)
        assert reply.body == b"pong" and reply.delivery.routing_key == name
    finally:
        await connection.close()


def test_amqplib_rpc(server: ServerProcess, qname: str, node_modules: Path) -> None:
    out = run_node("direct_reply.js", {"url": server.url, "queue": qname, "n": 5})
    assert out["replies"] == {f"c{i}": str(i * 2) for i in range(5)}
    assert out["replyTo"].startswith(RT + ".")

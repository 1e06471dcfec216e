"""Classic and quorum queues end to end with real clients (pika, aio-pika) on a real server.

What a user checks: declare (server-named, passive, exclusive, auto-delete), publish and
consume with and without acks, basic.get counts, nack/reject/requeue order and the
redelivered flag, prefetch, recover, purge, delete if-unused/if-empty, the cancel
notification, requeue on channel close, an RPC round trip and a work queue.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import aio_pika
import amqp
import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect

Declared = tuple[BlockingConnection, BlockingChannel]


@pytest.fixture
def declared(server: ServerProcess, qname: str) -> Iterator[Declared]:
    """A pika connection and channel with the classic queue ``qname`` declared; the queue goes
    afterwards (through a fresh connection: the test may have closed its channel)."""
    conn = connect(server)
    ch = conn.channel()
    ch.queue_declare(qname)
    yield conn, ch
    if conn.is_open:
        conn.close()
    cleanup = connect(server)
    cleanup.channel().queue_delete(qname)
    cleanup.close()


def publish_n(ch: BlockingChannel, queue: str, n: int, persistent: bool = False) -> None:
    props = pika.BasicProperties(delivery_mode=2 if persistent else 1)
    for i in range(n):
        ch.basic_publish("", queue, f"m{i}".encode(), props)


def drain_get(ch: BlockingChannel, queue: str) -> list[tuple[bytes, bool]]:
    out = []
    while True:
        method, _props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        out.append((body, method.redelivered))


def consume_n(ch: BlockingChannel, queue: str, n: int, timeout: float = 5.0) -> list[Any]:
    got: list[Any] = []
    for method, _props, body in ch.consume(queue, inactivity_timeout=timeout):
        if method is None:
            break
        got.append((method, body))
        if len(got) == n:
            break
    return got


def error_of(server: ServerProcess, action: Any) -> tuple[int, str]:
    conn = connect(server)
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        action(ch)
    conn.close()
    return info.value.reply_code, info.value.reply_text


def test_declare_server_named_passive_and_counts(server: ServerProcess) -> None:
    conn = connect(server)
    ch = conn.channel()
    ch.confirm_delivery()
    name = ch.queue_declare("", exclusive=True).method.queue
    assert name.startswith("amq.gen-") and len(name) == 30
    publish_n(ch, name, 3)
    ok = ch.queue_declare(name, passive=True).method
    assert (ok.message_count, ok.consumer_count) == (3, 0)
    method, _props, body = ch.basic_get(name)
    assert (body, method.message_count, method.redelivered) == (b"m0", 2, False)
    ch.basic_ack(method.delivery_tag)
    assert ch.queue_declare(name, passive=True).method.message_count == 2
    conn.close()


def test_exclusive_queue_is_locked_and_goes_with_its_connection(
    server: ServerProcess, qname: str
) -> None:
    owner = connect(server)
    ch = owner.channel()
    ch.queue_declare(qname, exclusive=True)
    code, text = error_of(server, lambda c: c.queue_declare(qname, passive=True))
    assert code == 405
    assert text.startswith(
        f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{qname}'"
    )
    code, _ = error_of(server, lambda c: c.basic_get(qname))
    assert code == 405
    owner.close()
    code, text = error_of(server, lambda c: c.queue_declare(qname, passive=True))
    assert (code, text) == (404, f"NOT_FOUND - no queue '{qname}' in vhost '/'")


def test_auto_delete_after_last_consumer(server: ServerProcess, qname: str) -> None:
    conn = connect(server)
    ch = conn.channel()
    ch.queue_declare(qname, auto_delete=True)
    tag = ch.basic_consume(qname, lambda *a: None)
    ch.queue_declare(qname, passive=True)  # still there with a consumer
    ch.basic_cancel(tag)
    conn.close()
    code, _ = error_of(server, lambda c: c.queue_declare(qname, passive=True))
    assert code == 404


def test_publish_routes_through_exchange_into_classic_queue(
    server: ServerProcess, qname: str
) -> None:
    conn = connect(server)
    ch = conn.channel()
    ch.exchange_declare(qname + ".x", "topic")
    ch.queue_declare(qname)
    ch.queue_bind(qname, qname + ".x", "a.*")
    ch.confirm_delivery()
    ch.basic_publish(qname + ".x", "a.b", b"yes")
    ch.basic_publish(qname + ".x", "b.b", b"no")
    assert drain_get(ch, qname) == [(b"yes", False)]
    ch.queue_delete(qname)
    ch.exchange_delete(qname + ".x")
    conn.close()


def test_nack_requeue_keeps_order_and_sets_redelivered(declared: Declared, qname: str) -> None:
    _conn, ch = declared
    ch.confirm_delivery()
    publish_n(ch, qname, 4)
    got = [ch.basic_get(qname) for _ in range(3)]
    # requeue the first and third, ack the second: they go back to their places
    ch.basic_nack(got[0][0].delivery_tag, requeue=True)
    ch.basic_ack(got[1][0].delivery_tag)
    ch.basic_reject(got[2][0].delivery_tag, requeue=True)
    assert drain_get(ch, qname) == [(b"m0", True), (b"m2", True), (b"m3", False)]
    # reject without requeue drops it
    publish_n(ch, qname, 1)
    method, _, _ = ch.basic_get(qname)
    ch.basic_reject(method.delivery_tag, requeue=False)
    assert drain_get(ch, qname) == []


def test_multiple_nack_and_unknown_tag(server: ServerProcess, qname: str) -> None:
    conn = connect(server)
    ch = conn.channel()
    ch.queue_declare(qname)
    ch.confirm_delivery()
    publish_n(ch, qname, 3)
    tags = [ch.basic_get(qname)[0].delivery_tag for _ in range(3)]
    ch.basic_nack(tags[-1], multiple=True, requeue=True)
    assert drain_get(ch, qname) == [(b"m0", True), (b"m1", True), (b"m2", True)]
    ch.queue_delete(qname)
    conn.close()
    code, text = error_of(server, lambda c: (c.basic_ack(42), c.queue_declare("", exclusive=True)))
    assert (code, text) == (406, "PRECONDITION_FAILED - unknown delivery tag 42")


def test_consume_manual_ack_with_prefetch(
    server: ServerProcess, declared: Declared, qname: str
) -> None:
    conn, ch = declared
    ch.confirm_delivery()
    publish_n(ch, qname, 10)
    ch.basic_qos(prefetch_count=3)
    seen: list[int] = []
    ch.basic_consume(qname, lambda c, m, p, b: seen.append(m.delivery_tag))
    conn.process_data_events(time_limit=0.5)
    assert len(seen) == 3  # prefetch holds the rest
    ch.basic_ack(seen[-1], multiple=True)
    conn.process_data_events(time_limit=0.5)
    assert len(seen) == 6
    conn.close()
    # the 4 unacked... were requeued on close: 10 - 3 acked
    again = connect(server)
    assert again.channel().queue_declare(qname, passive=True).method.message_count == 7
    again.close()


def test_global_prefetch_shared_by_consumers(declared: Declared, qname: str) -> None:
    conn, ch = declared
    ch.confirm_delivery()
    publish_n(ch, qname, 10)
    ch.basic_qos(prefetch_count=4, global_qos=True)
    seen: list[str] = []
    ch.basic_consume(qname, lambda c, m, p, b: seen.append(m.consumer_tag), consumer_tag="a")
    ch.basic_consume(qname, lambda c, m, p, b: seen.append(m.consumer_tag), consumer_tag="b")
    conn.process_data_events(time_limit=0.5)
    assert len(seen) == 4


def test_auto_ack_consumer_gets_everything(declared: Declared, qname: str) -> None:
    conn, ch = declared
    ch.confirm_delivery()
    publish_n(ch, qname, 50)
    bodies: list[bytes] = []
    ch.basic_consume(qname, lambda c, m, p, b: bodies.append(b), auto_ack=True)
    deadline = time.monotonic() + 15  # ends as soon as the wait is over
    while len(bodies) < 50 and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    assert bodies == [f"m{i}".encode() for i in range(50)]
    assert ch.queue_declare(qname, passive=True).method.message_count == 0


def test_round_robin_between_consumers(declared: Declared, qname: str) -> None:
    conn, ch = declared
    seen: list[str] = []
    for tag in ("c1", "c2"):
        ch.basic_consume(
            qname, lambda c, m, p, b: seen.append(m.consumer_tag), consumer_tag=tag, auto_ack=True
        )
    ch.confirm_delivery()
    publish_n(ch, qname, 6)
    conn.process_data_events(time_limit=0.5)
    assert sorted(seen) == ["c1"] * 3 + ["c2"] * 3


def test_recover_redelivers_unacked(declared: Declared, qname: str) -> None:
    conn, ch = declared
    ch.confirm_delivery()
    publish_n(ch, qname, 2)
    got: list[tuple[bytes, bool]] = []
    ch.basic_consume(qname, lambda c, m, p, b: got.append((b, m.redelivered)))
    conn.process_data_events(time_limit=0.3)
    ch.basic_recover(requeue=True)
    conn.process_data_events(time_limit=0.3)
    assert got == [(b"m0", False), (b"m1", False), (b"m0", True), (b"m1", True)]


def test_purge_and_delete_conditions(server: ServerProcess, qname: str) -> None:
    conn = connect(server)
    ch = conn.channel()
    ch.queue_declare(qname)
    ch.confirm_delivery()
    publish_n(ch, qname, 5)
    assert ch.queue_purge(qname).method.message_count == 5
    publish_n(ch, qname, 1)
    conn.close()
    code, text = error_of(server, lambda c: c.queue_delete(qname, if_empty=True))
    assert (code, text) == (406, f"PRECONDITION_FAILED - queue '{qname}' in vhost '/' not empty")
    conn = connect(server)
    ch = conn.channel()
    ch.basic_consume(qname, lambda *a: None)
    code, text = error_of(server, lambda c: c.queue_delete(qname, if_unused=True))
    assert (code, text) == (406, f"PRECONDITION_FAILED - queue '{qname}' in vhost '/' in use")
    conn.close()
    conn = connect(server)
    assert conn.channel().queue_delete(qname).method.message_count == 1
    conn.close()


def test_queue_delete_cancels_consumers(server: ServerProcess, qname: str) -> None:
    conn = connect(server)
    ch = conn.channel()
    ch.queue_declare(qname)
    cancelled: list[Any] = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    ch.basic_consume(qname, lambda *a: None, consumer_tag="watcher")
    other = connect(server)
    other.channel().queue_delete(qname)
    other.close()
    conn.process_data_events(time_limit=0.5)
    assert cancelled == ["watcher"]
    conn.close()


def test_delete_on_the_consuming_channel_answers_before_the_cancel(
    server: ServerProcess, qname: str
) -> None:
    """The channel that deletes a queue it consumes gets queue.delete-ok first and then its
    basic.cancel, as from RabbitMQ: py-amqp (kombu's client) fails the delete otherwise."""
    conn = amqp.Connection(f"{server.host}:{server.amqp_port}", userid="guest", password="guest")
    conn.connect()
    ch = conn.channel()
    ch.queue_declare(qname)
    cancelled: list[str] = []
    ch.basic_consume(qname, callback=lambda m: None, on_cancel=cancelled.append)
    assert ch.queue_delete(qname) == 0  # raised ConsumerCancelled when the cancel came first
    conn.drain_events(timeout=10)  # returns at the first frame: the cancel
    assert len(cancelled) == 1
    conn.close()


def test_channel_close_requeues_unacked(declared: Declared, qname: str) -> None:
    conn, ch = declared
    ch.confirm_delivery()
    publish_n(ch, qname, 3)
    ch2 = conn.channel()
    for _ in range(2):
        ch2.basic_get(qname)
    ch2.close()
    assert drain_get(ch, qname) == [(b"m0", True), (b"m1", True), (b"m2", False)]


def test_rpc_round_trip_over_exclusive_reply_queue(server: ServerProcess, qname: str) -> None:
    """A pika RPC server in a thread answers an aio-pika client over amq.gen-* reply queues."""
    srv = connect(server)
    sch = srv.channel()
    sch.queue_declare(qname)

    def on_request(c: BlockingChannel, m: Any, p: pika.BasicProperties, body: bytes) -> None:
        c.basic_publish(
            "",
            p.reply_to,
            body.upper(),
            pika.BasicProperties(correlation_id=p.correlation_id),
        )
        c.basic_ack(m.delivery_tag)

    sch.basic_qos(prefetch_count=1)
    sch.basic_consume(qname, on_request)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            srv.process_data_events(time_limit=0.05)

    thread = threading.Thread(target=serve)
    thread.start()

    async def client() -> list[bytes]:
        connection = await aio_pika.connect(server.url)
        async with connection:
            channel = await connection.channel()
            reply = await channel.declare_queue("", exclusive=True)
            assert reply.name.startswith("amq.gen-")
            answers: list[bytes] = []
            for i in range(5):
                await channel.default_exchange.publish(
                    aio_pika.Message(
                        f"ping{i}".encode(), reply_to=reply.name, correlation_id=str(i)
                    ),
                    routing_key=qname,
                )
                incoming = await reply.get(timeout=5, fail=False)
                while incoming is None:
                    await asyncio.sleep(0.01)
                    incoming = await reply.get(timeout=5, fail=False)
                assert incoming.correlation_id == str(i)
                await incoming.ack()
                answers.append(incoming.body)
            return answers

    try:
        assert asyncio.run(client()) == [f"PING{i}".encode() for i in range(5)]
    finally:
        stop.set()
        thread.join()
        sch.queue_delete(qname)
        srv.close()


def test_work_queue_with_aio_pika(server: ServerProcess, qname: str) -> None:
    """Two aio-pika workers with prefetch 1 share 40 persistent tasks; each is done once."""

    async def run() -> dict[str, list[int]]:
        connection = await aio_pika.connect(server.url)
        async with connection:
            pub = await connection.channel(publisher_confirms=True)
            queue = await pub.declare_queue(qname, durable=True)
            done: dict[str, list[int]] = {"w1": [], "w2": []}
            finished = asyncio.Event()

            async def worker(name: str) -> None:
                ch = await connection.channel()
                await ch.set_qos(prefetch_count=1)
                q = await ch.get_queue(qname)

                async def handle(msg: aio_pika.abc.AbstractIncomingMessage) -> None:
                    async with msg.process():
                        done[name].append(int(msg.body))
                        if sum(len(v) for v in done.values()) == 40:
                            finished.set()

                await q.consume(handle)

            await worker("w1")
            await worker("w2")
            for i in range(40):
                await pub.default_exchange.publish(
                    aio_pika.Message(
                        str(i).encode(), delivery_mode=aio_pika.DeliveryMode.PERSISTENT
                    ),
                    routing_key=qname,
                )
            await asyncio.wait_for(finished.wait(), 10)
            await queue.delete(if_unused=False)
            return done

    done = asyncio.run(run())
    assert sorted(done["w1"] + done["w2"]) == list(range(40))
    assert done["w1"] and done["w2"]  # both workers got work


def test_kombu_task_queue_round_trip(server: ServerProcess, qname: str) -> None:
    """kombu (Celery's transport) over py-amqp: a direct exchange and a durable task queue,
    messages published, fetched with manual acks, one rejected and requeued once."""
    import kombu

    exchange = kombu.Exchange(qname + ".tasks", type="direct", durable=True)
    queue = kombu.Queue(qname, exchange, routing_key="task", durable=True)
    with kombu.Connection(server.url) as conn:
        producer = conn.Producer()
        for i in range(3):
            producer.publish(
                {"task": "add", "args": [i, i]},
                exchange=exchange,
                routing_key="task",
                declare=[queue],
                serializer="json",
                delivery_mode=2,
            )
        bound = queue(conn.channel())
        first = bound.get(no_ack=False)
        assert first is not None and first.payload == {"task": "add", "args": [0, 0]}
        first.requeue()
        got = []
        while (message := bound.get(no_ack=False)) is not None:
            got.append((message.payload["args"][0], message.delivery_info["redelivered"]))
            message.ack()
        assert got == [(0, True), (1, False), (2, False)]
        bound.delete()
        exchange(conn.channel()).delete()


def test_get_right_after_publish_without_confirms(server: ServerProcess, qname: str) -> None:
    """A basic.get in the same read as the publish before it sees that message (aiormq's
    test_simple does this)."""

    async def run() -> bytes:
        import aiormq

        conn = await aiormq.connect(server.url)
        try:
            channel = await conn.channel(publisher_confirms=False)
            ok = await channel.queue_declare(qname, auto_delete=True)
            await channel.basic_publish(b"foo bar", routing_key=ok.queue)
            message = await channel.basic_get(ok.queue, no_ack=True)
            await channel.queue_delete(ok.queue)
            return message.body
        finally:
            await conn.close()

    assert asyncio.run(run()) == b"foo bar"

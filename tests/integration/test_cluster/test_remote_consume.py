"""Consuming, getting, acking and purging through a node that does not lead the queue.

Two real nodes and a real etcd: every queue here is declared on ``a`` (its leader) and used
through ``b``, which reaches it over the inter-node link; the clients (pika, aio-pika, kombu)
see what they would see on ``a``. The last test SIGKILLs ``a`` under a consumer on ``b``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aio_pika
import aiormq
import kombu
import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import consume_expected

from .cluster_helpers import OPEN, queues, until

# no replica on b: its consumers of a stream go through the link (test_replica_reads.py
# covers those that read a replica)
STREAM = {"x-queue-type": "stream", "x-initial-cluster-size": 1}


def connect(node: ServerProcess, params: pika.URLParameters | None = None) -> Any:
    """A pika connection to ``node`` (closed after the test, by conftest)."""
    conn = pika.BlockingConnection(params or pika.URLParameters(node.url + "?heartbeat=0"))
    OPEN.append(conn)
    return conn


def queue_on(node: ServerProcess, name: str) -> dict[str, Any] | None:
    return queues(node).get(name)


def declared_on_a(nodes: dict[str, ServerProcess], name: str, **kwargs: Any) -> Any:
    """Declare ``name`` on a and wait until b knows a leads it; a's channel."""
    ch = connect(nodes["a"]).channel()
    ch.queue_declare(name, durable=True, **kwargs)
    until(lambda: queue_on(nodes["b"], name), f"b knows {name}")
    return ch


def publish(ch: Any, queue: str, bodies: list[bytes], headers: list[dict[str, Any]]) -> None:
    ch.confirm_delivery()
    for body, h in zip(bodies, headers, strict=True):
        ch.basic_publish("", queue, body, pika.BasicProperties(headers=h, delivery_mode=2))


# ---------------------------------------------------------------------------- streams


def test_a_filtered_stream_consume_through_b_sees_exactly_the_matching_messages(
    nodes: dict[str, ServerProcess],
) -> None:
    on_a = declared_on_a(nodes, "events", arguments=STREAM)
    colours = ["red", "blue", "green"]
    bodies = [f"m{i}".encode() for i in range(60)]
    headers: list[dict[str, Any]] = [
        {"x-stream-filter-value": colours[i % 3], "n": i} for i in range(59)
    ]
    headers.append({"n": 59})  # one without a filter value
    publish(on_a, "events", bodies, headers)

    ch = connect(nodes["b"]).channel()
    ch.basic_qos(prefetch_count=7)
    red = consume_expected(ch, "events", 20, {"x-stream-offset": "first", "x-stream-filter": "red"})
    assert [body for _, _, body in red] == bodies[0:59:3]
    offsets = [props.headers["x-stream-offset"] for _, props, _ in red]
    assert offsets == list(range(0, 59, 3))  # the leader's offsets, as on a

    with_unfiltered = consume_expected(
        ch,
        "events",
        21,
        {
            "x-stream-offset": 50,
            "x-stream-filter": ["blue"],
            "x-stream-match-unfiltered": True,
        },
    )
    assert [body for _, _, body in with_unfiltered] == [b"m52", b"m55", b"m58", b"m59"]

    sql = consume_expected(
        ch, "events", 10, {"x-stream-offset": "first", "x-stream-filter-sql": "n >= 55"}
    )
    assert [body for _, _, body in sql] == bodies[55:]


def test_a_named_stream_consumer_through_b_resumes_where_it_left(
    nodes: dict[str, ServerProcess],
) -> None:
    on_a = declared_on_a(nodes, "ledger", arguments=STREAM)
    bodies = [f"l{i}".encode() for i in range(10)]
    publish(on_a, "ledger", bodies, [{}] * 10)
    args = {"x-stream-offset": "first", "x-stream-consumer-name": "audit"}
    ch = connect(nodes["b"]).channel()
    ch.basic_qos(prefetch_count=5)
    first = consume_expected(ch, "ledger", 10, args)
    assert [body for _, _, body in first] == bodies
    publish(on_a, "ledger", [b"l10", b"l11"], [{}, {}])
    ch = connect(nodes["b"]).channel()
    ch.basic_qos(prefetch_count=5)
    again = consume_expected(ch, "ledger", 2, {"x-stream-consumer-name": "audit"})
    assert [body for _, _, body in again] == [b"l10", b"l11"]


def test_a_bad_consume_argument_is_refused_with_the_leaders_reply(
    nodes: dict[str, ServerProcess],
) -> None:
    declared_on_a(nodes, "strict", arguments=STREAM)
    conn = connect(nodes["b"])
    ch = conn.channel()
    ch.basic_qos(prefetch_count=5)
    with pytest.raises(ChannelClosedByBroker) as refused:
        ch.basic_consume("strict", lambda *a: None, arguments={"x-stream-filter-sql": "n = "})
    assert refused.value.reply_code == 406
    assert "x-stream-filter-sql" in refused.value.reply_text
    assert conn.is_open  # a channel error only, as on the leader


# ---------------------------------------------------------------------------- classic


def test_a_classic_queue_through_b_with_prefetch_acks_nacks_and_close(
    nodes: dict[str, ServerProcess],
) -> None:
    on_a = declared_on_a(nodes, "jobs")
    publish(on_a, "jobs", [f"j{i}".encode() for i in range(10)], [{}] * 10)

    conn = connect(nodes["b"])
    ch = conn.channel()
    ch.basic_qos(prefetch_count=3)
    got: list[tuple[Any, bytes]] = []
    ch.basic_consume("jobs", lambda _c, m, _p, body: got.append((m, body)))
    until(lambda: conn.process_data_events(0.1) or len(got) >= 3, "three deliveries")
    conn.process_data_events(0.5)
    assert [b for _, b in got] == [b"j0", b"j1", b"j2"]  # the prefetch holds the rest
    assert [m.delivery_tag for m, _ in got] == [1, 2, 3]

    ch.basic_ack(2, multiple=True)  # j0, j1
    until(lambda: conn.process_data_events(0.1) or len(got) >= 5, "two more")
    ch.basic_nack(got[2][0].delivery_tag, requeue=True)  # j2 back to the queue
    until(lambda: conn.process_data_events(0.1) or len(got) >= 6, "j2 again")
    again = got[5]
    assert again[1] == b"j2" and again[0].redelivered and not got[2][0].redelivered
    ch.basic_reject(got[3][0].delivery_tag, requeue=False)  # j3 dropped
    ch.basic_ack(got[4][0].delivery_tag)  # j4
    ch.basic_ack(again[0].delivery_tag)  # j2
    until(lambda: conn.process_data_events(0.1) or len(got) >= 8, "the window refills")
    ch.close()  # two unacked: back on a

    left = until(lambda: _ready(nodes["a"], "jobs", 5), "the unacked are requeued on a")
    assert left["messages_unacknowledged"] == 0
    bodies = sorted(_drain(connect(nodes["a"]).channel(), "jobs"))
    assert bodies == [b"j5", b"j6", b"j7", b"j8", b"j9"]


def _ready(node: ServerProcess, name: str, n: int) -> dict[str, Any] | None:
    found = queue_on(node, name)
    if found is None or found.get("messages_ready") != n:
        return None
    return found


def _drain(ch: Any, queue: str) -> list[bytes]:
    out: list[bytes] = []
    while True:
        method, _, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        out.append(body)


def test_basic_get_purge_and_delete_through_b(
    nodes: dict[str, ServerProcess],
) -> None:
    on_a = declared_on_a(nodes, "inbox")
    publish(on_a, "inbox", [b"x", b"y", b"z", b"w"], [{}] * 4)
    ch = connect(nodes["b"]).channel()
    method, props, body = ch.basic_get("inbox")
    assert body == b"x" and method.message_count == 3 and method.delivery_tag == 1
    assert props.delivery_mode == 2
    ch.basic_nack(method.delivery_tag, requeue=True)
    method, _, body = ch.basic_get("inbox")
    assert body == b"x" and method.redelivered and method.delivery_tag == 2
    ch.basic_ack(method.delivery_tag)
    method, _, body = ch.basic_get("inbox", auto_ack=True)
    assert body == b"y"
    assert ch.queue_purge("inbox").method.message_count == 2
    assert ch.basic_get("inbox") == (None, None, None)
    until(lambda: _ready(nodes["a"], "inbox", 0), "a holds none")
    with pytest.raises(ChannelClosedByBroker) as locked:  # a's queue, nobody's exclusive one
        connect(nodes["b"]).channel().queue_declare("inbox", durable=True, exclusive=True)
    assert locked.value.reply_code == 405
    ch.queue_delete("inbox")
    until(lambda: queue_on(nodes["a"], "inbox") is None, "deleted on its leader")
    until(lambda: queue_on(nodes["b"], "inbox") is None, "b forgets it")


def test_a_consumer_through_b_is_cancelled_when_the_queue_is_deleted_on_a(
    nodes: dict[str, ServerProcess],
) -> None:
    on_a = declared_on_a(nodes, "short-lived")
    conn = connect(nodes["b"])
    ch = conn.channel()
    cancelled: list[Any] = []
    ch.add_on_cancel_callback(cancelled.append)
    ch.basic_consume("short-lived", lambda *a: None)
    on_a.queue_delete("short-lived")
    until(lambda: conn.process_data_events(0.1) or cancelled, "basic.cancel from the server")
    assert ch.is_open


def test_auto_delete_follows_the_last_consumer_wherever_it_is(
    nodes: dict[str, ServerProcess],
) -> None:
    on_a = declared_on_a(nodes, "fleeting", auto_delete=True)
    ch = connect(nodes["b"]).channel()
    tag = ch.basic_consume("fleeting", lambda *a: None)
    until(lambda: (queue_on(nodes["a"], "fleeting") or {}).get("consumers") == 1, "counted")
    ch.basic_cancel(tag)
    until(lambda: queue_on(nodes["a"], "fleeting") is None, "auto-deleted on a")
    on_a.close()


def test_kombu_and_aio_pika_consume_through_b(
    nodes: dict[str, ServerProcess],
) -> None:
    on_a = declared_on_a(nodes, "mixed")
    publish(on_a, "mixed", [b"k1", b"k2", b"k3", b"k4"], [{}] * 4)
    b = nodes["b"]
    with kombu.Connection(f"amqp://guest:guest@{b.host}:{b.amqp_port}//") as conn:
        queue = kombu.Queue("mixed", durable=True, no_declare=True)
        got: list[bytes] = []
        callbacks = [lambda _body, msg: (got.append(msg.body), msg.ack())]
        with conn.Consumer(queue, callbacks=callbacks, prefetch_count=1):
            deadline = time.monotonic() + 20
            while len(got) < 2 and time.monotonic() < deadline:
                conn.drain_events(timeout=5)
    assert got[:2] == [b"k1", b"k2"]  # (one drain may run the callback of one more)

    async def aio() -> bytes:
        url = f"amqp://guest:guest@{b.host}:{b.amqp_port}/"
        async with await aio_pika.connect(url) as aconn:
            channel = await aconn.channel()
            await channel.set_qos(prefetch_count=1)
            q = await channel.get_queue("mixed", ensure=False)
            async with q.iterator() as it:
                async for message in it:
                    await message.ack()
                    return message.body
        raise AssertionError("no message")

    # the next may have been in flight to kombu when it left: requeued at its place on a
    nxt = [b"k1", b"k2", b"k3", b"k4"][len(got)]
    assert asyncio.run(asyncio.wait_for(aio(), 30)) == nxt


def test_a_quorum_queue_through_b_counts_deliveries_and_an_exclusive_consumer_holds_on_a(
    nodes: dict[str, ServerProcess],
) -> None:
    on_a = declared_on_a(nodes, "votes", arguments={"x-queue-type": "quorum"})
    publish(on_a, "votes", [b"v"], [{}])
    conn = connect(nodes["b"])
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1)
    got: list[tuple[Any, Any]] = []
    ch.basic_consume("votes", lambda _c, m, props, _b: got.append((m, props)), exclusive=True)
    until(lambda: conn.process_data_events(0.1) or got, "the first delivery")
    ch.basic_nack(got[0][0].delivery_tag, requeue=True)
    until(lambda: conn.process_data_events(0.1) or len(got) == 2, "the redelivery")
    method, props = got[1]
    assert method.redelivered and props.headers["x-delivery-count"] == 1  # a's count
    assert not (got[0][1].headers or {}).get("x-delivery-count")

    # the consumer through b is exclusive on a too
    with pytest.raises(ChannelClosedByBroker) as refused:
        on_a.basic_consume("votes", lambda *a: None)
    assert refused.value.reply_code == 403 and "in exclusive use" in refused.value.reply_text
    ch.basic_ack(method.delivery_tag)


# ---------------------------------------------------------------------------- the leader dies


def test_the_leader_killed_under_a_consumer_through_b(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b = nodes["a"], nodes["b"]
    on_a = declared_on_a(nodes, "orders")
    publish(on_a, "orders", [f"o{i}".encode() for i in range(6)], [{}] * 6)
    on_a.connection.close()

    conn = connect(b)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=4)
    got: list[tuple[Any, bytes]] = []
    cancelled: list[Any] = []
    ch.add_on_cancel_callback(cancelled.append)
    ch.basic_consume("orders", lambda _c, m, _p, body: got.append((m, body)))
    until(lambda: conn.process_data_events(0.1) or len(got) >= 4, "four deliveries")
    ch.basic_ack(got[1][0].delivery_tag, multiple=True)  # o0, o1 acked; o2, o3 not
    # (the window refills after the acks: o4 and o5 go out unacked too)
    until(lambda: (queue_on(a, "orders") or {}).get("messages") == 4, "a has the acks")
    a.kill()
    until(lambda: conn.process_data_events(0.1) or cancelled, "the consumer is cancelled")
    assert ch.is_open  # pika asked for consumer_cancel_notify: a cancel, not a close
    ch.basic_ack(got[-1][0].delivery_tag)  # too late: ignored, not a channel error
    conn.process_data_events(0.3)
    assert ch.is_open

    # a client without consumer_cancel_notify: its channel is closed, naming the node
    a.restart()
    until(lambda: (queue_on(b, "orders") or {}).get("state") == "running", "a is back")
    left = sorted(_drain(connect(b).channel(), "orders"))
    assert left == [b"o2", b"o3", b"o4", b"o5"]  # nothing acked comes back, the rest does


def test_without_cancel_notify_the_channel_is_closed_naming_the_node(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b = nodes["a"], nodes["b"]
    on_a = declared_on_a(nodes, "plain")
    publish(on_a, "plain", [b"p"], [{}])
    on_a.connection.close()
    params = pika.URLParameters(b.url + "?heartbeat=0")
    params.client_properties = {"capabilities": {"basic.nack": True}}  # no cancel notify
    conn = connect(b, params)
    ch = conn.channel()
    ch.basic_consume("plain", lambda *a: None)
    conn.process_data_events(0.3)
    a.kill()
    with pytest.raises(ChannelClosedByBroker) as closed:
        ch.start_consuming()  # returns only when the channel closes
    assert closed.value.reply_code == 404
    text = closed.value.reply_text
    assert "cluster node 'a'" in text and "'plain'" in text, text
    a.restart()


def test_a_connection_error_of_one_client_leaves_the_link_to_the_others(
    nodes: dict[str, ServerProcess],
) -> None:
    on_a = declared_on_a(nodes, "tape", arguments=STREAM)
    publish(on_a, "tape", [b"t0"], [{}])
    conn = connect(nodes["b"])
    watcher = conn.channel()
    watcher.basic_qos(prefetch_count=5)
    got: list[bytes] = []
    cancelled: list[Any] = []
    watcher.add_on_cancel_callback(cancelled.append)
    watcher.basic_consume(
        "tape",
        lambda ch, m, _p, body: (got.append(body), ch.basic_ack(m.delivery_tag)),
        arguments={"x-stream-offset": "first"},
    )
    until(lambda: conn.process_data_events(0.1) or got, "the watcher's first message")

    with pytest.raises(ConnectionClosedByBroker) as refused:
        connect(nodes["b"]).channel().basic_get("tape")  # as on a: 540, the connection
    assert refused.value.reply_code == 540
    assert "basic.get not supported by stream queues" in refused.value.reply_text

    publish(on_a, "tape", [b"t1"], [{}])  # the watcher's link channel was not touched
    until(lambda: conn.process_data_events(0.1) or len(got) == 2, "the watcher goes on")
    assert got == [b"t0", b"t1"] and not cancelled


# ---------------------------------------------------------------------------- direct relay
# A consumer on a fresh channel through b: the leader numbers its deliveries for the client
# and b passes them on as they came; another source of deliveries on that channel (a get, a
# second consume) makes b number them again, with no tag given twice.


def _collect(conn: Any, got: list[Any], n: int, what: str) -> None:
    until(lambda: conn.process_data_events(0.1) or len(got) >= n, what)


def _consuming(node: ServerProcess, queue: str, prefetch: int) -> tuple[Any, Any, list[Any]]:
    """A consumer on a fresh channel of a new connection: (connection, channel, deliveries)."""
    conn = connect(node)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=prefetch)
    got: list[tuple[Any, bytes]] = []
    ch.basic_consume(queue, lambda _c, m, _p, body: got.append((m, body)))
    return conn, ch, got


def test_a_direct_consumer_then_a_local_get_and_a_second_consume_on_its_channel(
    nodes: dict[str, ServerProcess],
) -> None:
    on_a = declared_on_a(nodes, "direct-jobs")
    publish(on_a, "direct-jobs", [f"d{i}".encode() for i in range(8)], [{}] * 8)
    declared_on_a(nodes, "direct-more")
    publish(on_a, "direct-more", [b"m0", b"m1"], [{}] * 2)
    on_b = connect(nodes["b"]).channel()
    on_b.queue_declare("local-on-b", durable=True)
    publish(on_b, "local-on-b", [b"l0"], [{}])

    conn, ch, got = _consuming(nodes["b"], "direct-jobs", 3)
    _collect(conn, got, 3, "three deliveries")
    assert [(m.delivery_tag, b) for m, b in got] == [(1, b"d0"), (2, b"d1"), (3, b"d2")]
    ch.basic_ack(2)  # one by one, out of order
    _collect(conn, got, 4, "a fourth")
    ch.basic_nack(1, requeue=True)  # d0 back to the queue, redelivered by a
    _collect(conn, got, 5, "d0 again")
    assert got[4][1] == b"d0" and got[4][0].redelivered

    method, _, body = ch.basic_get("local-on-b")  # a second source: b numbers from now on
    assert body == b"l0"
    seen = [m.delivery_tag for m, _ in got]
    assert method.delivery_tag not in seen and method.delivery_tag > max(seen)
    ch.basic_consume("direct-more", lambda _c, m, _p, body: got.append((m, body)))
    ch.basic_ack(3)  # d2: a tag a gave, acked after the switch
    ch.basic_ack(method.delivery_tag)

    acked = [max(m.delivery_tag for m, _ in got)]

    def ack_what_came() -> bool:
        conn.process_data_events(0.1)
        top = max(m.delivery_tag for m, _ in got)
        if top > acked[-1]:  # one multiple ack over both link channels' (and a's tags)
            ch.basic_ack(top, multiple=True)
            acked.append(top)
        return len(got) >= 11

    until(ack_what_came, "the rest of both queues")
    conn.process_data_events(0.3)
    tags = [m.delivery_tag for m, _ in got]
    assert len(set(tags)) == len(tags) and method.delivery_tag not in tags
    expected = [f"d{i}".encode() for i in range(8)] + [b"d0", b"m0", b"m1"]
    assert sorted(b for _, b in got) == sorted(expected)
    ch.close()
    for name in ("direct-jobs", "direct-more"):
        left = until(lambda n=name: _ready(nodes["a"], n, 0), f"{name} drained on a")
        assert left["messages_unacknowledged"] == 0
    assert on_b.queue_declare("local-on-b", passive=True).method.message_count == 0


def test_a_direct_consumer_acking_a_tag_twice_gets_the_leaders_406(
    nodes: dict[str, ServerProcess],
) -> None:
    on_a = declared_on_a(nodes, "direct-unknown")
    publish(on_a, "direct-unknown", [b"u0", b"u1"], [{}] * 2)

    async def ack_twice() -> BaseException | None:
        conn = await aiormq.connect(nodes["b"].url)
        try:
            ch = await conn.channel()
            await ch.basic_qos(prefetch_count=10)
            got: list[Any] = []
            await ch.basic_consume("direct-unknown", got.append)
            async with asyncio.timeout(30):
                while len(got) < 2:
                    await asyncio.sleep(0.05)
                await ch.basic_ack(1)
                await ch.basic_ack(1)  # unknown now, as on a single node
                try:
                    await ch.closing
                except aiormq.exceptions.AMQPError as error:
                    return error
            return None
        finally:
            await conn.close()

    closed = asyncio.run(ack_twice())
    assert isinstance(closed, aiormq.exceptions.ChannelPreconditionFailed)
    assert "unknown delivery tag 1" in str(closed)
    until(lambda: _ready(nodes["a"], "direct-unknown", 1), "u1 requeued on a")


def test_a_direct_consumer_of_large_messages_and_basic_recover(
    nodes: dict[str, ServerProcess],
) -> None:
    """Turns larger than the link's frame_max reach the client whole (relay frames that go
    on in the next one); basic.recover redelivers what the client held."""
    on_a = declared_on_a(nodes, "direct-large")
    bodies = [bytes([65 + i]) * (300_000 + i) for i in range(4)]
    publish(on_a, "direct-large", bodies, [{}] * 4)
    conn, ch, got = _consuming(nodes["b"], "direct-large", 10)
    _collect(conn, got, 4, "four large messages")
    assert [b for _, b in got] == bodies
    assert [m.delivery_tag for m, _ in got] == [1, 2, 3, 4]
    ch.basic_ack(2, multiple=True)
    ch.basic_recover(requeue=True)  # the two held come again, redelivered
    _collect(conn, got, 6, "the held two again")
    assert [b for _, b in got[4:]] == bodies[2:]
    assert all(m.redelivered for m, _ in got[4:])
    ch.basic_ack(got[-1][0].delivery_tag, multiple=True)
    conn.process_data_events(0.3)
    left = until(lambda: _ready(nodes["a"], "direct-large", 0), "drained on a")
    assert left["messages_unacknowledged"] == 0


def test_two_clients_consuming_on_their_channel_1_through_one_link(
    nodes: dict[str, ServerProcess],
) -> None:
    """Both consumers' link channels cannot be numbered 1 on b's one link to a: the leader
    frames each one's deliveries for its client's channel all the same."""
    on_a = declared_on_a(nodes, "direct-one")
    declared_on_a(nodes, "direct-two")
    publish(on_a, "direct-one", [f"o{i}".encode() for i in range(5)], [{}] * 5)
    publish(on_a, "direct-two", [f"t{i}".encode() for i in range(5)], [{}] * 5)
    first = _consuming(nodes["b"], "direct-one", 10)
    second = _consuming(nodes["b"], "direct-two", 10)
    for (conn, ch, got), prefix in ((first, "o"), (second, "t")):
        assert ch.channel_number == 1
        _collect(conn, got, 5, f"{prefix}'s five")
        assert [(m.delivery_tag, b) for m, b in got] == [
            (i + 1, f"{prefix}{i}".encode()) for i in range(5)
        ]
        ch.basic_ack(5, multiple=True)
        conn.process_data_events(0.2)
    for name in ("direct-one", "direct-two"):
        left = until(lambda n=name: _ready(nodes["a"], n, 0), f"{name} drained on a")
        assert left["messages_unacknowledged"] == 0


def test_a_direct_consumer_cancelled_while_holding_then_another_consume_on_its_channel(
    nodes: dict[str, ServerProcess],
) -> None:
    on_a = declared_on_a(nodes, "direct-cancelled")
    declared_on_a(nodes, "direct-next")
    publish(on_a, "direct-cancelled", [f"c{i}".encode() for i in range(5)], [{}] * 5)
    publish(on_a, "direct-next", [b"n0", b"n1"], [{}] * 2)
    conn, ch, got = _consuming(nodes["b"], "direct-cancelled", 3)
    _collect(conn, got, 3, "three")
    ch.basic_cancel(got[0][0].consumer_tag)  # the three stay held, and can be acked
    ch.basic_consume("direct-next", lambda _c, m, _p, body: got.append((m, body)))
    _collect(conn, got, 5, "the next queue's two")
    assert [(m.delivery_tag, b) for m, b in got] == [
        (1, b"c0"),
        (2, b"c1"),
        (3, b"c2"),
        (4, b"n0"),
        (5, b"n1"),
    ]
    ch.basic_ack(2, multiple=True)  # c0, c1 on the cancelled consumer's link channel
    ch.basic_ack(5, multiple=True)  # c2 and the next queue's two
    conn.process_data_events(0.3)
    left = until(lambda: _ready(nodes["a"], "direct-cancelled", 2), "c3, c4 still on a")
    assert left["messages_unacknowledged"] == 0
    left = until(lambda: _ready(nodes["a"], "direct-next", 0), "direct-next drained")
    assert left["messages_unacknowledged"] == 0

"""kill -9 the server while a durable quorum queue's messages are held, returned and waiting.

After each restart every confirmed message that was not acked is there, ready; the ones a
consumer held come back redelivered with one more return in ``x-delivery-count`` (their
consumer went with the process), the returned ones with the count they had; and a poison
message that keeps being returned is dead-lettered once past ``x-delivery-limit``, restarts
or not (before the counts were in the log, every restart gave it a fresh allowance).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pika
import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect

pytestmark = pytest.mark.timeout(180)

QUEUE = "kill-quorum"
DLQ = "kill-quorum-dead"
ARGS = {
    "x-queue-type": "quorum",
    "x-delivery-limit": 3,
    "x-dead-letter-exchange": "",
    "x-dead-letter-routing-key": DLQ,
}


def kill(server: ServerProcess, conn: pika.BlockingConnection) -> None:
    server.kill()
    with contextlib.suppress(pika.exceptions.AMQPError):
        conn.close()


def count_of(props: pika.BasicProperties) -> Any:
    return (props.headers or {}).get("x-delivery-count")


def test_delivery_counts_and_limit_survive_sigkill(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        conn = connect(server)
        ch = conn.channel()
        ch.queue_declare(DLQ, durable=True, arguments={"x-queue-type": "quorum"})
        ch.queue_declare(QUEUE, durable=True, arguments=ARGS)
        ch.confirm_delivery()
        for body in (b"poison", b"returned", b"waiting"):
            ch.basic_publish("", QUEUE, body, pika.BasicProperties(delivery_mode=2))
        # the poison message is returned twice by a failing consumer
        for expected in (None, 1):
            method, props, body = ch.basic_get(QUEUE)
            assert body == b"poison" and count_of(props) == expected
            ch.basic_nack(method.delivery_tag, requeue=True)
        method, props, body = ch.basic_get(QUEUE)
        assert body == b"poison" and count_of(props) == 2  # held by the consumer
        got = ch.basic_get(QUEUE)
        assert got[2] == b"returned"
        ch.basic_nack(got[0].delivery_tag, requeue=True)  # returned once, waits ready
        ch.queue_declare(QUEUE, passive=True)  # a round trip: the nack was processed
        kill(server, conn)

        server.start()
        conn = connect(server)
        ch = conn.channel()
        ok = ch.queue_declare(QUEUE, durable=True, arguments=ARGS).method
        assert ok.message_count == 3
        seen = {}
        for _ in range(3):
            method, props, body = ch.basic_get(QUEUE)
            seen[body] = (count_of(props), method.redelivered)
            if body != b"poison":
                ch.basic_ack(method.delivery_tag)
        # the poison message was held: its consumer's return counts (3, the limit)
        assert seen == {
            b"poison": (3, True),
            b"returned": (1, True),
            b"waiting": (None, False),
        }
        ch.queue_declare(QUEUE, passive=True)
        kill(server, conn)  # held again: a fourth return, past the limit

        server.start()
        conn = connect(server)
        ch = conn.channel()
        method, _props, _body = ch.basic_get(QUEUE)
        assert method is None  # never delivered a fifth time
        method, props, body = ch.basic_get(DLQ, auto_ack=True)
        assert body == b"poison"
        deaths = (props.headers or {}).get("x-death") or []
        assert [d.get("reason") for d in deaths] in (
            [b"delivery_limit"],
            ["delivery_limit"],
        )
        assert ch.queue_declare(QUEUE, passive=True).method.message_count == 0
        conn.close()
    finally:
        if server.running:
            server.stop()


def test_consumer_deliveries_held_at_sigkill_come_back_counted(tmp_path: Path) -> None:
    """A consumer with prefetch holds a run of deliveries (one delivered mark write per
    turn); after the kill all of them come back redelivered with a count of 1, in order,
    and the ones it acked stay gone."""
    server = ServerProcess(tmp_path / "data").start()
    try:
        conn = connect(server)
        ch = conn.channel()
        ch.queue_declare(QUEUE, durable=True, arguments={"x-queue-type": "quorum"})
        ch.confirm_delivery()
        for i in range(50):
            ch.basic_publish("", QUEUE, b"m%d" % i, pika.BasicProperties(delivery_mode=2))
        ch.basic_qos(prefetch_count=20)
        received: list[tuple[int, bytes]] = []
        for method, _props, body in ch.consume(QUEUE, inactivity_timeout=30):
            assert method is not None
            received.append((method.delivery_tag, body))
            if len(received) == 20:
                break
        ch.basic_ack(received[9][0], multiple=True)  # m0..m9 done, m10..m19 held
        ch.queue_declare(QUEUE, passive=True)
        kill(server, conn)

        server.start()
        conn = connect(server)
        ch = conn.channel()
        got = []
        while True:
            method, props, body = ch.basic_get(QUEUE, auto_ack=True)
            if method is None:
                break
            got.append((body, count_of(props), method.redelivered))
        assert got[:10] == [(b"m%d" % i, 1, True) for i in range(10, 20)]
        # the prefetch may have taken a few more than the 20 the client read: any of them
        # is redelivered with its count; the rest were never handed out
        rest = [b for b, *_ in got[10:]]
        assert rest == [b"m%d" % i for i in range(20, 50)]
        assert all((c, r) in ((None, False), (1, True)) for _, c, r in got[10:])
        conn.close()
    finally:
        if server.running:
            server.stop()

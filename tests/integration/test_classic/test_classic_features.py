"""Queue features over real pika clients: TTL, expiration, max-length + overflow,
dead-lettering with x-death, priorities, single active consumer, consumer priorities,
transactions and quorum queues' delivery limit."""

from __future__ import annotations

import time
from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import client
from sievemq.testing.pika_client import connect


@pytest.fixture
def ch(server: ServerProcess) -> Any:
    conn = connect(server)
    channel = conn.channel()
    yield channel
    if conn.is_open:
        conn.close()


def bodies(ch: BlockingChannel, queue: str) -> list[bytes]:
    out = []
    while True:
        method, _props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        out.append(body)


def error_of(server: ServerProcess, action: Any) -> tuple[int, str]:
    conn = connect(server)
    channel = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        action(channel)
    conn.close()
    return info.value.reply_code, info.value.reply_text


def test_message_ttl_and_per_message_expiration(ch: BlockingChannel, qname: str) -> None:
    # a TTL long enough that "new" cannot expire before the read on a slow machine
    ch.queue_declare(qname, arguments={"x-message-ttl": 1000})
    ch.confirm_delivery()
    ch.basic_publish("", qname, b"old")
    ch.basic_publish("", qname, b"short", pika.BasicProperties(expiration="0"))
    time.sleep(1.2)
    ch.basic_publish("", qname, b"new")
    assert bodies(ch, qname) == [b"new"]
    ch.queue_delete(qname)


def test_dead_letter_on_reject_and_expiry_with_x_death(ch: BlockingChannel, qname: str) -> None:
    dlq = qname + ".dlq"
    ch.exchange_declare(qname + ".dlx", "fanout")
    ch.queue_declare(dlq)
    ch.queue_bind(dlq, qname + ".dlx")
    ch.queue_declare(
        qname, arguments={"x-dead-letter-exchange": qname + ".dlx", "x-message-ttl": 100}
    )
    ch.confirm_delivery()
    ch.basic_publish("", qname, b"rejected")
    method, _, _ = ch.basic_get(qname)
    ch.basic_reject(method.delivery_tag, requeue=False)
    ch.basic_publish("", qname, b"expired")
    got = []
    deadline = time.monotonic() + 10  # the expiry is dead-lettered after 100 ms, or later
    while len(got) < 2 and time.monotonic() < deadline:
        method, props, body = ch.basic_get(dlq, auto_ack=True)
        if method is None:
            time.sleep(0.05)
            continue
        got.append((body, props.headers))
    assert [b for b, _ in got] == [b"rejected", b"expired"]
    death = got[0][1]["x-death"][0]
    assert death["reason"] == "rejected" and death["queue"] == qname and death["count"] == 1
    assert death["exchange"] == "" and death["routing-keys"] == [qname]
    assert got[0][1]["x-first-death-reason"] == "rejected"
    assert got[1][1]["x-death"][0]["reason"] == "expired"
    for name in (qname, dlq):
        ch.queue_delete(name)
    ch.exchange_delete(qname + ".dlx")


def test_max_length_drop_head_and_reject_publish(ch: BlockingChannel, qname: str) -> None:
    ch.queue_declare(qname, arguments={"x-max-length": 2})
    ch.confirm_delivery()
    for i in range(4):
        ch.basic_publish("", qname, f"m{i}".encode())
    assert bodies(ch, qname) == [b"m2", b"m3"]
    other = qname + ".rp"
    ch.queue_declare(other, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    ch.basic_publish("", other, b"a")
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", other, b"b")
    assert bodies(ch, other) == [b"a"]
    ch.queue_delete(qname)
    ch.queue_delete(other)


def test_max_length_bytes(ch: BlockingChannel, qname: str) -> None:
    ch.queue_declare(qname, arguments={"x-max-length-bytes": 10})
    ch.confirm_delivery()
    for body in (b"12345", b"67890", b"abcde"):
        ch.basic_publish("", qname, body)
    assert bodies(ch, qname) == [b"67890", b"abcde"]
    ch.queue_delete(qname)


def test_priority_queue_delivers_highest_first(ch: BlockingChannel, qname: str) -> None:
    ch.queue_declare(qname, arguments={"x-max-priority": 5})
    ch.confirm_delivery()
    for body, prio in ((b"low", 1), (b"high", 5), (b"none", 0), (b"mid", 3), (b"over", 9)):
        ch.basic_publish("", qname, body, pika.BasicProperties(priority=prio))
    assert bodies(ch, qname) == [b"high", b"over", b"mid", b"low", b"none"]
    ch.queue_delete(qname)


def test_single_active_consumer(server: ServerProcess, ch: BlockingChannel, qname: str) -> None:
    ch.queue_declare(qname, arguments={"x-single-active-consumer": True})
    seen: list[str] = []
    ch.basic_consume(qname, lambda c, m, p, b: seen.append(m.consumer_tag), True, consumer_tag="a")
    ch.basic_consume(qname, lambda c, m, p, b: seen.append(m.consumer_tag), True, consumer_tag="b")
    ch.confirm_delivery()
    for _ in range(4):
        ch.basic_publish("", qname, b"x")
    ch.connection.process_data_events(time_limit=0.3)
    assert seen == ["a"] * 4
    ch.basic_cancel("a")
    ch.basic_publish("", qname, b"x")
    ch.connection.process_data_events(time_limit=0.3)
    assert seen[-1] == "b"
    ch.queue_delete(qname)


def test_consumer_priorities(ch: BlockingChannel, qname: str) -> None:
    ch.queue_declare(qname)
    seen: list[str] = []
    ch.basic_consume(qname, lambda c, m, p, b: seen.append(m.consumer_tag), True, consumer_tag="lo")
    ch.basic_consume(
        qname,
        lambda c, m, p, b: seen.append(m.consumer_tag),
        True,
        consumer_tag="hi",
        arguments={"x-priority": 10},
    )
    ch.confirm_delivery()
    for _ in range(4):
        ch.basic_publish("", qname, b"x")
    ch.connection.process_data_events(time_limit=0.3)
    assert seen == ["hi"] * 4
    ch.queue_delete(qname)


def test_transactions_commit_and_rollback(server: ServerProcess, qname: str) -> None:
    conn = connect(server)
    ch = conn.channel()
    ch.queue_declare(qname)
    ch.tx_select()
    ch.basic_publish("", qname, b"a")
    assert ch.queue_declare(qname, passive=True).method.message_count == 0  # held
    ch.tx_rollback()
    ch.basic_publish("", qname, b"b")
    ch.tx_commit()
    assert ch.queue_declare(qname, passive=True).method.message_count == 1
    method, _, body = ch.basic_get(qname)
    assert body == b"b"
    ch.basic_ack(method.delivery_tag)
    ch.tx_rollback()  # the ack is dropped: the message stays unacked
    ch.basic_ack(method.delivery_tag)
    ch.tx_commit()
    conn.close()
    conn = connect(server)
    assert conn.channel().queue_declare(qname, passive=True).method.message_count == 0
    conn.close()
    code, text = error_of(server, lambda c: c.tx_commit())
    assert (code, text) == (406, "PRECONDITION_FAILED - channel is not transactional")
    code, text = error_of(server, lambda c: (c.tx_select(), c.confirm_delivery()))
    assert (code, text) == (406, "PRECONDITION_FAILED - cannot switch from tx to confirm mode")


def test_quorum_queue_rules_and_delivery_limit(
    server: ServerProcess, ch: BlockingChannel, qname: str
) -> None:
    quorum = {"x-queue-type": "quorum"}
    code, text = error_of(server, lambda c: c.queue_declare(qname, durable=False, arguments=quorum))
    assert (code, text) == (
        406,
        f"PRECONDITION_FAILED - invalid property 'non-durable' for queue '{qname}' in vhost '/'",
    )
    code, text = error_of(
        server, lambda c: c.queue_declare(qname, durable=True, exclusive=True, arguments=quorum)
    )
    assert code == 406 and "exclusive-owner" in text
    ch.queue_declare(qname, durable=True, arguments={**quorum, "x-delivery-limit": 1})
    ch.confirm_delivery()
    ch.basic_publish("", qname, b"poison")
    counts = []
    for _ in range(2):
        method, props, _ = ch.basic_get(qname)
        counts.append((props.headers or {}).get("x-delivery-count"))
        ch.basic_nack(method.delivery_tag, requeue=True)
    assert counts == [None, 1]
    assert ch.basic_get(qname) == (None, None, None)  # past the limit: dropped
    ch.queue_delete(qname)


def test_x_expires_deletes_an_unused_queue(server: ServerProcess, qname: str) -> None:
    conn = connect(server)
    conn.channel().queue_declare(qname, arguments={"x-expires": 300})
    conn.close()
    # the sweep runs every second; watched over HTTP, which does not count as a use
    deadline = time.monotonic() + 10
    with client(server) as http:
        while http.get(f"/api/queues/%2F/{qname}").status_code == 200:
            assert time.monotonic() < deadline, "the unused queue was not deleted"
            time.sleep(0.1)
    code, _ = error_of(server, lambda c: c.queue_declare(qname, passive=True))
    assert code == 404

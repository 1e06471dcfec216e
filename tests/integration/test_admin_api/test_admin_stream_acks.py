"""Acks of AMQP consumers on a stream are counted in ``message_stats.ack``, per message
acknowledged, as RabbitMQ 3.10.8 counts them (checked against the peer: 10 deliveries from a
stream, 4 single acks then ``multiple=true`` up to the 7th: the queue's ``ack`` is 7; all 10
acked: 10; the overview and ``rabbitmq_global_messages_acknowledged_total`` add them)."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx

from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import client, q
from sievemq.testing.pika_client import connect

ACKED_STREAM = (
    'rabbitmq_global_messages_acknowledged_total{protocol="amqp091",'
    'queue_type="rabbit_stream_queue"}'
)


def _metric(http: httpx.Client, sample: str) -> float:
    found = re.search(rf"^{re.escape(sample)} (\S+)$", http.get("/metrics").text, re.M)
    assert found, f"{sample} not in the scrape"
    return float(found.group(1))


def _queue_stats(http: httpx.Client, name: str) -> dict[str, Any]:
    reply = http.get(f"/api/queues/%2F/{q(name)}")
    assert reply.status_code == 200
    stats: dict[str, Any] = reply.json()["message_stats"]
    return stats


def _wait_for_acks(http: httpx.Client, name: str, want: int) -> dict[str, Any]:
    """The client's acks are in flight: wait (bounded) for the server to have read them."""
    deadline = time.monotonic() + 20
    stats = _queue_stats(http, name)
    while stats["ack"] != want and time.monotonic() < deadline:
        time.sleep(0.05)
        stats = _queue_stats(http, name)
    return stats


def test_stream_consumer_acks_are_counted(server: ServerProcess, qname: str) -> None:
    conn = connect(server)
    ch = conn.channel()
    ch.queue_declare(qname, durable=True, arguments={"x-queue-type": "stream"})
    ch.confirm_delivery()
    for i in range(10):
        ch.basic_publish("", qname, b"m%d" % i)
    with client(server) as http:
        overview_before = http.get("/api/overview").json()["message_stats"]["ack"]
        metric_before = _metric(http, ACKED_STREAM)
        assert _queue_stats(http, qname)["ack"] == 0
        ch.basic_qos(prefetch_count=20)
        tags: list[int] = []
        ch.basic_consume(
            qname,
            lambda _c, m, _p, _b: tags.append(m.delivery_tag),
            arguments={"x-stream-offset": "first"},
        )
        deadline = time.monotonic() + 20
        while len(tags) < 10 and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.1)
        assert len(tags) == 10
        # delivered, nothing acked yet
        assert _queue_stats(http, qname)["ack"] == 0

        for tag in tags[:4]:
            ch.basic_ack(tag)
        ch.basic_ack(tags[6], multiple=True)  # one frame, three messages: counts 3
        conn.process_data_events(time_limit=0)
        assert _wait_for_acks(http, qname, 7)["ack"] == 7

        ch.basic_ack(tags[9], multiple=True)
        conn.process_data_events(time_limit=0)
        stats = _wait_for_acks(http, qname, 10)
        assert stats["ack"] == 10
        assert stats["deliver"] == 10
        # the ack rate: a request adds a sample at most once a second, the first one was
        # taken before the acks (ack 0), so a later one shows the acks as a rate
        deadline = time.monotonic() + 10
        while stats["ack_details"]["rate"] <= 0 and time.monotonic() < deadline:
            time.sleep(0.2)
            stats = _queue_stats(http, qname)
        assert stats["ack_details"]["rate"] > 0, stats
        assert http.get("/api/overview").json()["message_stats"]["ack"] - overview_before == 10
        assert _metric(http, ACKED_STREAM) - metric_before == 10
        listed = [x for x in http.get("/api/queues/%2F").json() if x["name"] == qname]
        assert listed[0]["message_stats"]["ack"] == 10
    conn.close()

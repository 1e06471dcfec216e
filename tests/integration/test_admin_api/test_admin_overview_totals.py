"""The overview's cumulative message_stats (and Prometheus' rabbitmq_global_messages_*
counters) never go back when a queue is deleted, as a RabbitMQ 3.10.8 node answers (checked
against the peer: 20 published, 10 got and acked, the queue deleted, the overview still says
publish 20, get 10, ack 10, deliver_get 10; a stream consumer's acks are counted and stay
too)."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
import pika

from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import client, q
from sievemq.testing.pika_client import connect

DELIVERED_CLASSIC = (
    'rabbitmq_global_messages_delivered_total{protocol="amqp091",queue_type="rabbit_classic_queue"}'
)
DELIVERED_STREAM = (
    'rabbitmq_global_messages_delivered_total{protocol="amqp091",queue_type="rabbit_stream_queue"}'
)
ACKED_STREAM = (
    'rabbitmq_global_messages_acknowledged_total{protocol="amqp091",'
    'queue_type="rabbit_stream_queue"}'
)


def _counts(http: httpx.Client) -> dict[str, int]:
    stats: dict[str, Any] = http.get("/api/overview").json()["message_stats"]
    return {k: v for k, v in stats.items() if not k.endswith("_details")}


def _metric(http: httpx.Client, sample: str) -> float:
    text = http.get("/metrics").text
    found = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.M)
    assert found, f"{sample} not in the scrape"
    return float(found.group(1))


def test_deleting_queues_keeps_the_overview_totals(server: ServerProcess, qname: str) -> None:
    classic, stream, other = qname + "-c", qname + "-s", qname + "-h"
    conn = connect(server)
    ch = conn.channel()
    ch.queue_declare(classic, durable=True)
    ch.queue_declare(other, durable=False)
    ch.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    with client(server) as http:
        start = _counts(http)
        for _ in range(20):
            ch.basic_publish("", classic, b"x")
        for _ in range(4):
            ch.basic_publish("", other, b"y")
            ch.basic_publish("", stream, b"z")
        for _ in range(10):
            method, _, _ = ch.basic_get(classic, auto_ack=False)
            ch.basic_ack(method.delivery_tag)
        ch.basic_get(other, auto_ack=True)
        # a consumer reads the stream's 4 messages
        ch.basic_qos(prefetch_count=10)
        seen: list[bytes] = []
        ch.basic_consume(
            stream,
            lambda c, m, _p, body: (seen.append(body), c.basic_ack(m.delivery_tag)),
            arguments={"x-stream-offset": "first"},
        )
        deadline = time.monotonic() + 20
        while len(seen) < 4 and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.1)
        assert len(seen) == 4
        conn.process_data_events(time_limit=0)  # the last ack out
        before = _counts(http)
        while before["ack"] - start["ack"] < 14 and time.monotonic() < deadline:
            time.sleep(0.05)  # the stream's acks are in flight: wait for the server to read them
            before = _counts(http)
        moved = {k: before[k] - start[k] for k in ("publish", "get", "get_no_ack", "ack")}
        assert moved == {"publish": 28, "get": 10, "get_no_ack": 1, "ack": 14}  # 10 + 4 acks
        assert before["deliver_get"] - start["deliver_get"] == 15
        stream_stats = http.get(f"/api/queues/%2F/{q(stream)}").json()["message_stats"]
        assert stream_stats["ack"] == 4
        metrics_before = (
            _metric(http, DELIVERED_CLASSIC),
            _metric(http, DELIVERED_STREAM),
            _metric(http, ACKED_STREAM),
        )

        ch.queue_delete(classic)  # over AMQP, with messages still in it
        conn.close()  # the stream's consumer goes with its connection
        assert http.delete(f"/api/queues/%2F/{q(stream)}").status_code == 204  # over HTTP
        assert http.delete(f"/api/queues/%2F/{q(other)}").status_code == 204
        after = _counts(http)
        metrics_after = (
            _metric(http, DELIVERED_CLASSIC),
            _metric(http, DELIVERED_STREAM),
            _metric(http, ACKED_STREAM),
        )
    assert after == before
    assert metrics_after == metrics_before


def test_deleting_a_vhost_keeps_the_overview_totals(server: ServerProcess, qname: str) -> None:
    vhost = qname + "-vh"
    with client(server) as http:
        assert http.put(f"/api/vhosts/{q(vhost)}").status_code == 201
        perms = {"configure": ".*", "write": ".*", "read": ".*"}
        assert http.put(f"/api/permissions/{q(vhost)}/guest", json=perms).status_code == 201
        params = pika.URLParameters(server.url)
        params.virtual_host = vhost
        conn = pika.BlockingConnection(params)
        ch = conn.channel()
        ch.queue_declare("work", durable=True)
        for _ in range(3):
            ch.basic_publish("", "work", b"x")
        ch.basic_get("work", auto_ack=True)
        conn.close()
        before = _counts(http)
        assert http.delete(f"/api/vhosts/{q(vhost)}").status_code == 204
        assert _counts(http) == before

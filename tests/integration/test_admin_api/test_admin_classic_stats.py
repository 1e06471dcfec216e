"""Classic queues over real HTTP, driven by pika: purging (DELETE .../contents) as RabbitMQ
does, and every ``message_stats`` counter with its rate, in the queue's page, in
``/api/overview`` and in Prometheus (``/metrics`` and ``/metrics/per-object``)."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
import pika
import pika.exceptions
import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import client, q
from sievemq.testing.pika_client import connect

GLOBAL_GET_AUTO = (
    'rabbitmq_global_messages_delivered_get_auto_ack_total{protocol="amqp091",'
    'queue_type="rabbit_classic_queue"}'
)


def _metric(text: str, sample: str) -> float:
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{sample} not in the scrape")


def _overview_stats(http: httpx.Client) -> dict[str, Any]:
    stats: dict[str, Any] = http.get("/api/overview").json()["message_stats"]
    return stats


def test_purge_drops_ready_messages_and_keeps_unacked(server: ServerProcess, qname: str) -> None:
    conn = connect(server)
    ch = conn.channel()
    ch.queue_declare(qname, durable=True)
    for i in range(5):
        ch.basic_publish("", qname, f"m{i}".encode())
    method, _, body = ch.basic_get(qname, auto_ack=False)  # one stays unacked
    assert body == b"m0"
    with client(server) as http:
        r = http.delete(f"/api/queues/%2F/{q(qname)}/contents")
        assert r.status_code == 204 and r.content == b""
        page = http.get(f"/api/queues/%2F/{q(qname)}").json()
    assert (page["messages_ready"], page["messages_unacknowledged"]) == (0, 1)
    # AMQP sees the purge: nothing ready; the unacked one comes back on nack
    assert ch.queue_declare(qname, passive=True).method.message_count == 0
    ch.basic_nack(method.delivery_tag, requeue=True)
    _, _, again = ch.basic_get(qname, auto_ack=True)
    assert again == b"m0"
    assert ch.basic_get(qname, auto_ack=True) == (None, None, None)
    conn.close()


def test_purge_refusals(server: ServerProcess, qname: str) -> None:
    stream = qname + "-s"
    conn = connect(server)
    ch = conn.channel()
    ch.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    ch.queue_declare(qname + "-x", exclusive=True)
    with client(server) as http:
        on_stream = http.delete(f"/api/queues/%2F/{q(stream)}/contents")
        missing = http.delete(f"/api/queues/%2F/{q(qname)}-nope/contents")
        locked = http.delete(f"/api/queues/%2F/{q(qname)}-x/contents")
        http.put(f"/api/queues/%2F/{q(qname)}", json={"durable": False})
        http.put("/api/users/purger", json={"password": "pw", "tags": "management"})
        http.put("/api/permissions/%2F/purger", json={"configure": ".*", "write": ".*", "read": ""})
    with client(server, "purger", "pw") as http:
        no_read = http.delete(f"/api/queues/%2F/{q(qname)}/contents")
    conn.close()
    assert on_stream.status_code == 400
    assert on_stream.json() == {
        "error": "bad_request",
        "reason": f"540 queue.purge not supported by stream queues queue '{stream}' in vhost '/'",
    }
    assert missing.status_code == 404
    assert locked.status_code == 400
    assert locked.json()["reason"].startswith("405 cannot obtain exclusive access to locked queue")
    assert no_read.status_code == 401
    assert no_read.json()["error"] == "not_authorised"


def test_every_message_stat_counts_and_has_a_rate(server: ServerProcess, qname: str) -> None:
    with client(server) as http:
        assert http.put(f"/api/queues/%2F/{q(qname)}", json={"durable": True}).status_code == 201
        http.get(f"/api/queues/%2F/{q(qname)}")  # the rates' first sample: all zero
        before = _overview_stats(http)
        scrape_before = http.get("/metrics").text
    conn = connect(server)
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(8):
        ch.basic_publish("", qname, f"m{i}".encode())  # confirmed: 8 confirms
    with pytest.raises(pika.exceptions.UnroutableError):  # returned, then confirmed
        ch.basic_publish("", qname + "-nobody", b"x", mandatory=True)
    raw = conn.channel()  # no confirms: unroutable and not mandatory is dropped
    raw.basic_publish("", qname + "-nobody", b"y")
    _, _, b = ch.basic_get(qname, auto_ack=True)  # get_no_ack 1
    method, _, _ = ch.basic_get(qname, auto_ack=False)  # get 1, then acked
    ch.basic_ack(method.delivery_tag)
    method, _, _ = ch.basic_get(qname, auto_ack=False)  # get 1, requeued
    ch.basic_nack(method.delivery_tag, requeue=True)
    got: list[Any] = []
    ch.basic_qos(prefetch_count=2)
    tag = ch.basic_consume(qname, lambda c, m, p, body: got.append(m), auto_ack=False)
    deadline = time.monotonic() + 10
    while len(got) < 2 and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    ch.basic_cancel(tag)  # the redelivered m2 and m3: deliver 2, redeliver 1
    for m in got:
        ch.basic_ack(m.delivery_tag)
    auto = conn.channel()
    seen: list[bytes] = []
    auto.basic_consume(qname, lambda c, m, p, body: seen.append(body), auto_ack=True)
    deadline = time.monotonic() + 10
    while len(seen) < 4 and time.monotonic() < deadline:  # m4..m7: deliver_no_ack 4
        conn.process_data_events(0.05)
    assert ch.basic_get(qname, auto_ack=True) == (None, None, None)  # get_empty 1
    time.sleep(1.1)  # a second rate sample, a second later
    with client(server) as http:
        stats = http.get(f"/api/queues/%2F/{q(qname)}").json()["message_stats"]
        after = _overview_stats(http)
        scrape = http.get("/metrics").text
        per_object = http.get("/metrics/per-object").text
    conn.close()
    assert b == b"m0" and len(seen) == 4
    expected = {
        "publish": 8,
        "get_no_ack": 1,
        "get": 2,
        "deliver": 2,
        "deliver_no_ack": 4,
        "deliver_get": 9,
        "ack": 3,
        "redeliver": 1,
        "get_empty": 1,
    }
    assert {k: stats[k] for k in expected} == expected
    for key, count in expected.items():  # every counter moved, so every rate is > 0
        assert stats[key + "_details"]["rate"] > 0, key
        assert stats[key + "_details"]["rate"] <= count / 1.0, key
    # the overview: the same counters summed over the node, plus confirms and unroutables
    delta = {k: after[k] - before[k] for k in after if not k.endswith("_details")}
    for key, count in expected.items():
        assert delta[key] >= count, key  # other tests' queues may add to the node's totals
    assert delta["confirm"] >= 9
    assert delta["return_unroutable"] >= 1 and delta["drop_unroutable"] >= 1
    assert after["publish_details"]["rate"] > 0 and after["confirm_details"]["rate"] > 0
    # Prometheus: RabbitMQ's global families by protocol and queue type, and per object
    assert _metric(scrape, GLOBAL_GET_AUTO) - _metric(scrape_before, GLOBAL_GET_AUTO) >= 1
    sample = 'rabbitmq_global_messages_confirmed_total{protocol="amqp091"}'
    assert _metric(scrape, sample) - _metric(scrape_before, sample) >= 9
    labels = f'{{vhost="/",queue="{qname}"}}'
    assert _metric(per_object, f"rabbitmq_queue_messages_published_total{labels}") == 8
    assert _metric(per_object, f"rabbitmq_queue_messages{labels}") == 0
    assert _metric(per_object, f"sievemq_queue_ack_total{labels}") == 3
    assert _metric(per_object, f"sievemq_queue_get_empty_total{labels}") == 1
    assert _metric(per_object, f"sievemq_queue_deliver_no_ack_total{labels}") == 4
    assert re.search(r"^# TYPE sievemq_queue_redeliver_total counter$", per_object, re.M)


def test_a_classic_queues_bindings(server: ServerProcess, qname: str) -> None:
    conn = connect(server)
    ch = conn.channel()
    ch.queue_declare(qname, durable=True)
    ch.queue_bind(qname, "amq.direct", routing_key="rk")
    conn.close()
    with client(server) as http:
        r = http.get(f"/api/queues/%2F/{q(qname)}/bindings")
        missing = http.get(f"/api/queues/%2F/{q(qname)}-nope/bindings")
    assert r.status_code == 200
    assert [(b["source"], b["routing_key"]) for b in r.json()] == [
        ("", qname),
        ("amq.direct", "rk"),
    ]
    assert missing.status_code == 404


def test_a_classic_queues_consumer_counts_in_the_overview(
    server: ServerProcess, qname: str
) -> None:
    with client(server) as http:
        assert http.put(f"/api/queues/%2F/{q(qname)}", json={"durable": True}).status_code == 201
        before = http.get("/api/overview").json()["object_totals"]["consumers"]
        conn = connect(server)
        try:
            conn.channel().basic_consume(qname, lambda c, m, p, body: None, auto_ack=True)
            during = http.get("/api/overview").json()["object_totals"]["consumers"]
        finally:
            conn.close()
        after = http.get("/api/overview").json()["object_totals"]["consumers"]
    assert (during, after) == (before + 1, before)

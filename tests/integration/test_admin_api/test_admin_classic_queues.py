"""Classic and quorum queues in RabbitMQ's management API, over real HTTP against a real
server, compared with what RabbitMQ 3.10.8 answered (``rabbitmq_3_10_8_classic_get.json``):
POST .../get with every ackmode, encoding and truncate; message_stats; consumer_details;
definitions import and export of classic and quorum queues."""

from __future__ import annotations

import json
import time
from pathlib import Path

from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import client, q
from sievemq.testing.pika_client import connect

HERE = Path(__file__).resolve().parent
RABBIT_GET = json.loads((HERE / "rabbitmq_3_10_8_classic_get.json").read_text())
RABBIT_DEFS = json.loads((HERE / "rabbitmq_3_10_8_definitions.json").read_text())
PUBLISHED = [
    {"payload": "hello", "payload_encoding": "string", "properties": {}},
    {
        "payload": "wérld",
        "payload_encoding": "string",
        "properties": {
            "delivery_mode": 2,
            "headers": {"k": "v", "n": 1},
            "content_type": "text/plain",
        },
    },
    {"payload": "/w==", "payload_encoding": "base64", "properties": {}},
]


def _publish_three(http: object, queue: str) -> None:
    for message in PUBLISHED:
        r = http.post(  # type: ignore[attr-defined]
            "/api/exchanges/%2F/amq.default/publish", json={**message, "routing_key": queue}
        )
        assert r.json() == {"routed": True}


def test_get_answers_as_rabbitmq(server: ServerProcess, qname: str) -> None:
    """The same requests in the same order get the same answers as RabbitMQ gave
    (status, payloads, properties shown as [] when empty, redelivered, message_count)."""
    with client(server) as http:
        assert http.put(f"/api/queues/%2F/{q(qname)}", json={"durable": True}).status_code == 201
        _publish_three(http, qname)
        for step in RABBIT_GET["steps"]:
            r = http.post(f"/api/queues/%2F/{q(qname)}/get", json=step["request"])
            expected = step["answer"]
            if isinstance(expected, list):
                expected = [dict(m, routing_key=qname) for m in expected]
            assert (r.status_code, r.json()) == (step["status"], expected), step["request"]
        stats = http.get(f"/api/queues/%2F/{q(qname)}").json()["message_stats"]
    # RabbitMQ's counters after the same steps: 6 gets with acks, 1 without, 4 redeliveries
    assert {k: stats[k] for k in ("publish", "get", "get_no_ack", "deliver_get", "redeliver")} == {
        "publish": 3,
        "get": 6,
        "get_no_ack": 1,
        "deliver_get": 7,
        "redeliver": 4,
    }
    assert stats["ack"] == 0 and stats["deliver"] == 0
    assert set(stats) >= {"publish_details", "deliver_get_details", "redeliver_details"}


def test_get_checks_and_refusals(server: ServerProcess, qname: str) -> None:
    with client(server) as http:
        http.put(f"/api/queues/%2F/{q(qname)}", json={"durable": True})
        http.post(
            "/api/exchanges/%2F/amq.default/publish",
            json={"routing_key": qname, "payload": "x", "payload_encoding": "string",
                  "properties": {}},
        )  # fmt: skip
        bad_mode = http.post(
            f"/api/queues/%2F/{q(qname)}/get",
            json={"count": 1, "ackmode": "bogus", "encoding": "auto"},
        )
        negative = http.post(
            f"/api/queues/%2F/{q(qname)}/get",
            json={"count": -3, "ackmode": "ack_requeue_true", "encoding": "auto"},
        )
        not_json = http.post(f"/api/queues/%2F/{q(qname)}/get", content=b"{nope")
        depth = http.get(f"/api/queues/%2F/{q(qname)}").json()["messages"]
    # RabbitMQ answers an unknown ackmode with a 500 crash report; SieveMQ with a 400
    assert bad_mode.status_code == 400 and "bogus" in bad_mode.json()["reason"]
    assert negative.status_code == 200 and negative.json() == []
    assert not_json.status_code == 400
    assert depth == 1  # nothing was taken by the refused requests


def test_get_needs_read_permission(server: ServerProcess, qname: str) -> None:
    with client(server) as http:
        http.put(f"/api/queues/%2F/{q(qname)}", json={"durable": True})
        http.put("/api/users/getter", json={"password": "pw", "tags": "management"})
        http.put("/api/permissions/%2F/getter", json={"configure": "", "write": ".*", "read": ""})
    with client(server, "getter", "pw") as http:
        r = http.post(
            f"/api/queues/%2F/{q(qname)}/get",
            json={"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"},
        )
    assert r.status_code == 401
    assert r.json()["error"] == "not_authorised"


def test_consumer_details_and_deliver_stats(server: ServerProcess, qname: str) -> None:
    conn = connect(server)
    ch = conn.channel()
    ch.queue_declare(qname, durable=True)
    ch.basic_qos(prefetch_count=7)
    for i in range(3):
        ch.basic_publish("", qname, f"m{i}".encode())
    got: list[bytes] = []

    def on_message(channel: object, method: object, props: object, body: bytes) -> None:
        got.append(body)
        ch.basic_ack(method.delivery_tag)  # type: ignore[attr-defined]

    ch.basic_consume(qname, on_message, consumer_tag="ctag-1")
    deadline = time.monotonic() + 10
    while len(got) < 3 and time.monotonic() < deadline:
        conn.process_data_events(0.1)
    with client(server) as http:
        page = http.get(f"/api/queues/%2F/{q(qname)}").json()
        listed = [c for c in http.get("/api/consumers").json() if c["queue"]["name"] == qname]
    conn.close()
    assert got == [b"m0", b"m1", b"m2"]
    assert page["consumers"] == 1
    [detail] = page["consumer_details"]
    assert detail["consumer_tag"] == "ctag-1"
    assert detail["prefetch_count"] == 7 and detail["ack_required"] is True
    assert detail["queue"] == {"name": qname, "vhost": "/"}
    assert detail["channel_details"]["number"] == 1
    assert [c["consumer_tag"] for c in listed] == ["ctag-1"]
    stats = page["message_stats"]
    assert (stats["publish"], stats["deliver"], stats["ack"], stats["deliver_get"]) == (3, 3, 3, 3)


def test_definitions_with_classic_and_quorum_queues_round_trip(
    fresh_server: ServerProcess,
) -> None:
    """A RabbitMQ definitions file with a classic queue (no x-queue-type, as RabbitMQ
    exports it) and a quorum queue imports; the export holds both with their types."""
    doc = json.loads(json.dumps(RABBIT_DEFS))
    doc["queues"] += [
        {"name": "work", "vhost": "/", "durable": True, "auto_delete": False,
         "arguments": {"x-max-length": 10}},
        {"name": "votes", "vhost": "/", "durable": True, "auto_delete": False,
         "arguments": {"x-queue-type": "quorum", "x-delivery-limit": 3}},
    ]  # fmt: skip
    doc["bindings"].append(
        {"source": "amq.direct", "vhost": "/", "destination": "work",
         "destination_type": "queue", "routing_key": "w", "arguments": {}}
    )  # fmt: skip
    with client(fresh_server) as http:
        r = http.post("/api/definitions", json=doc)
        assert r.status_code == 204, r.text
        queues = {x["name"]: x for x in http.get("/api/queues/%2F").json()}
        exported = http.get("/api/definitions").json()
    assert queues["work"]["type"] == "classic"
    assert queues["work"]["arguments"] == {"x-max-length": 10}
    assert queues["votes"]["type"] == "quorum"
    names = {x["name"] for x in exported["queues"]}
    assert {"work", "votes"} <= names
    assert any(b["destination"] == "work" for b in exported["bindings"])
    # the queue works over AMQP, max-length included
    conn = connect(fresh_server)
    ch = conn.channel()
    for i in range(12):
        ch.basic_publish("amq.direct", "w", str(i).encode())
    time.sleep(0.2)
    declared = ch.queue_declare("work", durable=True, passive=True)
    conn.close()
    assert declared.method.message_count == 10
    # and it survives a restart (stored in the definitions)
    fresh_server.stop()
    fresh_server.start()
    with client(fresh_server) as http:
        assert http.get("/api/queues/%2F/work").json()["type"] == "classic"


def test_definitions_with_an_unknown_queue_type_change_nothing(fresh_server: ServerProcess) -> None:
    doc = {
        "queues": [
            {"name": "fine", "vhost": "/", "durable": True, "arguments": {}},
            {"name": "odd", "vhost": "/", "durable": True,
             "arguments": {"x-queue-type": "mqtt-qos0"}},
        ]
    }  # fmt: skip
    with client(fresh_server) as http:
        r = http.post("/api/definitions", json=doc)
        names = [x["name"] for x in http.get("/api/queues").json()]
    assert r.status_code == 400
    assert "'odd'" in r.json()["reason"] and "mqtt-qos0" in r.json()["reason"]
    assert names == []


def test_reject_requeue_false_dead_letters(server: ServerProcess, qname: str) -> None:
    ackmode = "reject_requeue_false"
    dlq = qname + "-dlq"
    with client(server) as http:
        http.put(f"/api/queues/%2F/{q(dlq)}", json={"durable": True})
        http.put(
            f"/api/queues/%2F/{q(qname)}",
            json={"durable": True, "arguments": {"x-dead-letter-exchange": "",
                                                 "x-dead-letter-routing-key": dlq}},
        )  # fmt: skip
        _publish_three(http, qname)
        r = http.post(
            f"/api/queues/%2F/{q(qname)}/get",
            json={"count": 2, "ackmode": ackmode, "encoding": "auto"},
        )
        moved = http.post(
            f"/api/queues/%2F/{q(dlq)}/get",
            json={"count": 5, "ackmode": "ack_requeue_false", "encoding": "auto"},
        )
    assert [m["payload"] for m in r.json()] == ["hello", "wérld"]
    assert [m["payload"] for m in moved.json()] == ["hello", "wérld"]

"""RabbitMQ's management API on SieveMQ's admin port: real server, real HTTP (httpx), real
AMQP clients (pika). Field names, nesting, codes and texts follow what RabbitMQ 3.10.8
answered (tests/integration/test_admin_api/rabbitmq_3_10_8_*.json, captured from a live node)."""

from __future__ import annotations

import base64
import json
import threading
import time
from pathlib import Path

import pika
import pika.exceptions
import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import client, q

HERE = Path(__file__).resolve().parent
RABBIT_QUEUE = json.loads((HERE / "rabbitmq_3_10_8_stream_queue.json").read_text())
RABBIT_DEFS = json.loads((HERE / "rabbitmq_3_10_8_definitions.json").read_text())


def amqp(
    server: ServerProcess,
    name: str = "adm-test",
    user: str = "guest",
    pw: str = "guest",
    vhost: str = "/",
) -> pika.BlockingConnection:
    params = pika.ConnectionParameters(
        host=server.host,
        port=server.amqp_port,
        virtual_host=vhost,
        credentials=pika.PlainCredentials(user, pw),
        client_properties={"connection_name": name},
    )
    return pika.BlockingConnection(params)


def declare(server: ServerProcess, name: str, **args: object) -> None:
    with client(server) as http:
        r = http.put(
            f"/api/queues/%2F/{q(name)}",
            json={"durable": True, "arguments": {"x-queue-type": "stream", **args}},
        )
        assert r.status_code == 201, r.text


# ----------------------------------------------------------------------------- auth


def test_no_credentials_is_401_with_the_basic_challenge(server: ServerProcess) -> None:
    import httpx

    r = httpx.get(server.admin_url + "/api/overview")
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == 'Basic realm="RabbitMQ Management"'
    assert r.content == b""


def test_bad_password_and_missing_tags_are_refused(server: ServerProcess) -> None:
    with client(server, "guest", "wrong") as bad:
        r = bad.get("/api/overview")
    assert r.status_code == 401
    assert r.json() == {"error": "not_authorized", "reason": "Login failed"}
    with client(server) as http:
        assert http.put("/api/users/plain", json={"password": "pw", "tags": ""}).status_code in (
            201,
            204,
        )
        assert http.put("/api/users/mon", json={"password": "pw", "tags": "monitoring"})
    with client(server, "plain", "pw") as plain:
        r = plain.get("/api/overview")
    assert r.status_code == 401
    assert r.json() == {"error": "not_authorised", "reason": "Not management user"}
    with client(server, "mon", "pw") as mon:
        assert mon.get("/api/overview").status_code == 200
        assert mon.get("/api/queues").status_code == 200
        r = mon.put("/api/vhosts/nope")
        assert r.status_code == 401
        assert r.json() == {"error": "not_authorised", "reason": "Not administrator user"}
        assert mon.get("/api/users").status_code == 401


# ----------------------------------------------------------------------------- node


def test_overview_whoami_nodes_extensions(server: ServerProcess) -> None:
    with client(server) as http:
        overview = http.get("/api/overview").json()
        assert http.get("/api/whoami").json() == {"name": "guest", "tags": ["administrator"]}
        nodes = http.get("/api/nodes").json()
        assert http.get("/api/extensions").json() == []
    for key in (
        "message_stats",
        "queue_totals",
        "object_totals",
        "listeners",
        "node",
        "rabbitmq_version",
        "management_version",
        "exchange_types",
    ):
        assert key in overview, key
    assert set(overview["object_totals"]) == {
        "channels",
        "connections",
        "consumers",
        "exchanges",
        "queues",
    }
    ports = {(li["protocol"], li["port"]) for li in overview["listeners"]}
    assert ("amqp", server.amqp_port) in ports and ("http", server.admin_port) in ports
    assert nodes[0]["name"] == overview["node"] and nodes[0]["running"] is True


def test_health_checks_and_aliveness(server: ServerProcess) -> None:
    with client(server) as http:
        for path in (
            "alarms",
            "local-alarms",
            "virtual-hosts",
            "ready-to-serve-clients",
            "is-in-service",
            "below-node-connection-limit",
            f"port-listener/{server.amqp_port}",
            "protocol-listener/amqp",
        ):
            r = http.get(f"/api/health/checks/{path}")
            assert r.status_code == 200 and r.json()["status"] == "ok", path
        r = http.get("/api/health/checks/port-listener/1")
        assert r.status_code == 503
        assert r.json()["status"] == "failed" and r.json()["reason"] == "No active listener"
        assert r.json()["missing"] == 1 and server.amqp_port in r.json()["ports"]
        assert http.get("/api/aliveness-test/%2F").json() == {"status": "ok"}
        r = http.get("/api/aliveness-test/missing")
        assert r.status_code == 404
        assert r.json() == {"error": "Object Not Found", "reason": "Not Found"}


# ----------------------------------------------------------------------------- queues


def test_queue_put_get_delete_as_rabbitmq(server: ServerProcess, qname: str) -> None:
    with client(server) as http:
        body = {"durable": True, "arguments": {"x-queue-type": "stream", "x-max-age": "7D"}}
        assert http.put(f"/api/queues/%2F/{q(qname)}", json=body).status_code == 201
        assert http.put(f"/api/queues/%2F/{q(qname)}", json=body).status_code == 204
        got = http.get(f"/api/queues/%2F/{q(qname)}").json()
        listed = http.get("/api/queues/%2F").json()
        assert http.delete(f"/api/queues/%2F/{q(qname)}").status_code == 204
        r = http.get(f"/api/queues/%2F/{q(qname)}")
        assert r.status_code == 404
        assert r.json() == {"error": "Object Not Found", "reason": "Not Found"}
    wanted = set(RABBIT_QUEUE) - {"garbage_collection", "reductions", "reductions_details"}
    assert wanted <= set(got), wanted - set(got)
    assert got["type"] == "stream" and got["name"] == qname and got["vhost"] == "/"
    assert got["arguments"] == {"x-queue-type": "stream", "x-max-age": "7D"}
    assert {"segments", "first_timestamp", "committed_offset"} <= set(got)  # RabbitMQ 4
    assert qname in [item["name"] for item in listed]


def test_queue_put_validates_like_queue_declare(server: ServerProcess, qname: str) -> None:
    declare(server, qname, **{"x-max-age": "7D"})
    with client(server) as http:
        r = http.put(
            f"/api/queues/%2F/{q(qname)}",
            json={"durable": True, "arguments": {"x-queue-type": "stream"}},
        )
        bad = http.put(
            f"/api/queues/%2F/{q(qname)}-bad",
            json={"durable": True, "arguments": {"x-queue-type": "stream", "x-max-age": "7X"}},
        )
    assert r.status_code == 400
    assert r.json() == {
        "error": "bad_request",
        "reason": f"inequivalent arg 'x-max-age' for queue '{qname}' in vhost '/': "
        "received none but current is the value '7D' of type 'longstr'",
    }
    # the same refusal over AMQP carries the same text
    conn = amqp(server)
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(
            f"{qname}-bad", durable=True, arguments={"x-queue-type": "stream", "x-max-age": "7X"}
        )
    conn.close()
    assert bad.status_code == 400
    assert info.value.reply_text == "PRECONDITION_FAILED - " + bad.json()["reason"]


def test_basic_get_and_purge_on_a_stream_are_refused(server: ServerProcess, qname: str) -> None:
    declare(server, qname)
    with client(server) as http:
        r = http.post(
            f"/api/queues/%2F/{q(qname)}/get",
            json={"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"},
        )
        missing_keys = http.post("/api/queues/%2F/missing-q/get", json={})
        missing_q = http.post(
            "/api/queues/%2F/missing-q/get",
            json={"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"},
        )
    # as RabbitMQ 3.10.8 answered: the body is checked first, then the queue
    assert missing_keys.status_code == 400
    assert missing_keys.json()["reason"] == (
        "[{key_missing,ackmode},{key_missing,count},{key_missing,encoding}]"
    )
    assert missing_q.status_code == 404
    assert missing_q.json() == {
        "error": "not_found",
        "reason": "NOT_FOUND - no queue 'missing-q' in vhost '/'",
    }
    assert r.status_code == 400
    assert r.json() == {
        "error": "bad_request",
        "reason": f"540 basic.get not supported by stream queues queue '{qname}' in vhost '/'",
    }


def test_pagination(server: ServerProcess, qname: str) -> None:
    for i in range(3):
        declare(server, f"{qname}-{i}")
    with client(server) as http:
        page = http.get(
            "/api/queues", params={"page": 2, "page_size": 1, "name": qname, "pagination": "true"}
        ).json()
        regex = http.get(
            "/api/queues",
            params={
                "page": 1,
                "page_size": 10,
                "name": f"{qname}-[02]$",
                "use_regex": "true",
                "sort": "name",
                "sort_reverse": "true",
                "columns": "name,type",
            },
        ).json()
        err = http.get("/api/queues", params={"page": 0})
        big = http.get("/api/queues", params={"page": 1, "page_size": 501})
    assert set(page) == {
        "filtered_count",
        "item_count",
        "items",
        "page",
        "page_count",
        "page_size",
        "total_count",
    }
    assert page["filtered_count"] == 3 and page["item_count"] == 1 and page["page_count"] == 3
    assert page["items"][0]["name"] == f"{qname}-1"
    assert regex["items"] == [
        {"name": f"{qname}-2", "type": "stream"},
        {"name": f"{qname}-0", "type": "stream"},
    ]
    assert err.status_code == 400
    assert err.json() == {
        "error": "invalid_pagination_parameters",
        "reason": "Invalid pagination parameters: page number 0, page size undefined",
    }
    assert big.status_code == 400


# ----------------------------------------------------------------------------- publish


def test_publish_is_stored_before_the_answer_and_filters_apply(
    server: ServerProcess, qname: str
) -> None:
    declare(server, qname)
    with client(server) as http:
        for value, payload in (("red", "r1"), ("blue", "b1"), ("red", "r2")):
            r = http.post(
                "/api/exchanges/%2F/amq.default/publish",
                json={
                    "routing_key": qname,
                    "payload": payload,
                    "payload_encoding": "string",
                    "properties": {
                        "headers": {"x-stream-filter-value": value},
                        "content_type": "text/plain",
                    },
                },
            )
            assert r.status_code == 200 and r.json() == {"routed": True}
            # confirmed stored before the answer: the count is there at once
        assert http.get(f"/api/queues/%2F/{q(qname)}").json()["messages"] == 3
        raw = http.post(
            "/api/exchanges/%2F/amq.default/publish",
            json={
                "routing_key": qname,
                "payload": base64.b64encode(b"\x00\xff").decode(),
                "payload_encoding": "base64",
                "properties": {},
            },
        )
        nowhere = http.post(
            "/api/exchanges/%2F/amq.direct/publish",
            json={
                "routing_key": "no-such-key",
                "payload": "x",
                "payload_encoding": "string",
                "properties": {},
            },
        )
        badenc = http.post(
            "/api/exchanges/%2F/amq.default/publish",
            json={
                "routing_key": qname,
                "payload": "!!",
                "payload_encoding": "base64",
                "properties": {},
            },
        )
    assert raw.json() == {"routed": True}
    assert nowhere.json() == {"routed": False}
    assert badenc.status_code == 400
    conn = amqp(server)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10)
    got: list[bytes] = []
    for _method, props, body in ch.consume(
        qname,
        arguments={"x-stream-offset": "first", "x-stream-filter": "red"},
        inactivity_timeout=2,
    ):
        if body is None:
            break
        got.append(body)
        assert props.content_type == "text/plain"
        if len(got) == 2:
            break
    conn.close()
    assert got == [b"r1", b"r2"]


# ----------------------------------------------------------------------------- exchanges


def test_exchanges_and_bindings(server: ServerProcess, qname: str) -> None:
    declare(server, qname)
    x = f"{qname}-x"
    with client(server) as http:
        assert http.put(f"/api/exchanges/%2F/{x}", json={"type": "topic"}).status_code == 201
        assert http.put(f"/api/exchanges/%2F/{x}", json={"type": "topic"}).status_code == 204
        r = http.put(f"/api/exchanges/%2F/{x}", json={"type": "direct"})
        assert r.status_code == 400 and "inequivalent arg 'type'" in r.json()["reason"]
        assert http.get(f"/api/exchanges/%2F/{x}").json()["type"] == "topic"
        r = http.post(f"/api/bindings/%2F/e/{x}/q/{q(qname)}", json={"routing_key": "a.*"})
        assert r.status_code == 201 and r.headers["location"] == "a.*"
        pair = http.get(f"/api/bindings/%2F/e/{x}/q/{q(qname)}").json()
        one = http.get(f"/api/bindings/%2F/e/{x}/q/{q(qname)}/a.*")
        qb = http.get(f"/api/queues/%2F/{q(qname)}/bindings").json()
        routed = http.post(
            f"/api/exchanges/%2F/{x}/publish",
            json={
                "routing_key": "a.b",
                "payload": "m",
                "payload_encoding": "string",
                "properties": {},
            },
        ).json()
        assert http.delete(f"/api/bindings/%2F/e/{x}/q/{q(qname)}/a.*").status_code == 204
        assert http.get(f"/api/bindings/%2F/e/{x}/q/{q(qname)}/a.*").status_code == 404
        assert http.delete(f"/api/exchanges/%2F/{x}").status_code == 204
        assert http.get(f"/api/exchanges/%2F/{x}").status_code == 404
        r = http.put("/api/exchanges/%2F/bad-type", json={"type": "nonsense"})
    assert pair == [
        {
            "source": x,
            "vhost": "/",
            "destination": qname,
            "destination_type": "queue",
            "routing_key": "a.*",
            "arguments": {},
            "properties_key": "a.*",
        }
    ]
    assert one.status_code == 200 and one.json()["routing_key"] == "a.*"
    assert [b["source"] for b in qb] == ["", x]  # the default exchange's binding first
    assert routed == {"routed": True}
    assert r.status_code == 400


# ----------------------------------------------------------------------------- connections


def test_connections_channels_consumers_and_close(server: ServerProcess, qname: str) -> None:
    declare(server, qname)
    conn = amqp(server, name=f"conn-{qname}")
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10)
    ch.basic_consume(
        qname,
        lambda *a: None,
        consumer_tag="ctag-1",
        arguments={"x-stream-offset": "first", "x-stream-filter": "red"},
    )
    conn.process_data_events(0.2)
    with client(server) as http:
        conns = [
            c
            for c in http.get("/api/connections").json()
            if c["user_provided_name"] == f"conn-{qname}"
        ]
        assert len(conns) == 1
        c = conns[0]
        channels = http.get(f"/api/connections/{q(c['name'])}/channels").json()
        consumers = [
            x for x in http.get("/api/consumers/%2F").json() if x["queue"]["name"] == qname
        ]
        queue = http.get(f"/api/queues/%2F/{q(qname)}").json()
        r = http.delete(f"/api/connections/{q(c['name'])}", headers={"X-Reason": "bye now"})
        assert r.status_code == 204
        missing = http.delete("/api/connections/nope")
    for key in (
        "name",
        "user",
        "vhost",
        "peer_host",
        "peer_port",
        "host",
        "port",
        "protocol",
        "client_properties",
        "channels",
        "frame_max",
        "channel_max",
        "connected_at",
        "state",
        "auth_mechanism",
        "timeout",
        "ssl",
    ):
        assert key in c, key
    assert c["user"] == "guest" and c["port"] == server.amqp_port
    assert c["name"] == f"{c['peer_host']}:{c['peer_port']} -> {c['host']}:{c['port']}"
    assert c["protocol"] == "AMQP 0-9-1" and c["channels"] == 1
    assert channels[0]["number"] == 1 and channels[0]["prefetch_count"] == 10
    assert channels[0]["consumer_count"] == 1
    assert channels[0]["name"] == f"{c['name']} (1)"
    assert consumers[0]["consumer_tag"] == "ctag-1"
    assert consumers[0]["arguments"]["x-stream-filter"] == ["red"]
    assert consumers[0]["channel_details"]["connection_name"] == c["name"]
    assert consumers[0]["prefetch_count"] == 10 and consumers[0]["ack_required"] is True
    assert queue["consumers"] == 1 and len(queue["consumer_details"]) == 1
    assert missing.status_code == 404
    closed = threading.Event()
    reason: list[str] = []
    deadline = time.monotonic() + 15  # ends as soon as the wait is over
    while time.monotonic() < deadline and not closed.is_set():
        try:
            conn.process_data_events(0.1)
        except pika.exceptions.ConnectionClosedByBroker as error:
            reason.append(f"{error.reply_code} {error.reply_text}")
            closed.set()
    assert reason == ["320 CONNECTION_FORCED - bye now"]


# ----------------------------------------------------------------------------- vhosts, users


def test_vhosts_users_permissions(server: ServerProcess, qname: str) -> None:
    vh = f"vh-{qname}"
    with client(server) as http:
        assert http.put(f"/api/vhosts/{q(vh)}").status_code == 201
        assert http.put(f"/api/vhosts/{q(vh)}").status_code == 204
        assert vh in [v["name"] for v in http.get("/api/vhosts").json()]
        assert http.put(
            "/api/users/alice", json={"password": "s3cret", "tags": "management"}
        ).status_code in (201, 204)
        user = http.get("/api/users/alice").json()
        r = http.put(
            f"/api/permissions/{q(vh)}/alice",
            json={"configure": "^alice-", "write": ".*", "read": ".*"},
        )
        assert r.status_code == 201
        perms = http.get("/api/users/alice/permissions").json()
        bad = http.put(
            f"/api/permissions/{q(vh)}/alice", json={"configure": "(", "write": ".*", "read": ".*"}
        )
        unknown = http.put(
            "/api/permissions/no-such-vhost/alice",
            json={"configure": ".*", "write": ".*", "read": ".*"},
        )
    assert user["hashing_algorithm"] == "rabbit_password_hashing_sha256"
    salted = base64.b64decode(user["password_hash"])
    assert len(salted) == 4 + 32 and user["tags"] == ["management"]
    assert perms == [
        {"user": "alice", "vhost": vh, "configure": "^alice-", "write": ".*", "read": ".*"}
    ]
    assert bad.status_code == 400 and "configure" in bad.json()["reason"]
    assert unknown.status_code == 404
    # the new user logs in over AMQP to the vhost it was given
    conn = amqp(server, user="alice", pw="s3cret", vhost=vh)
    assert conn.is_open
    conn.close()
    with client(server, "alice", "s3cret") as alice:
        assert alice.get("/api/whoami").json() == {"name": "alice", "tags": ["management"]}
        assert [v["name"] for v in alice.get("/api/vhosts").json()] == [vh]
        assert alice.put(f"/api/queues/{q(vh)}/alice-s", json={}).status_code == 201
        r = alice.put(f"/api/queues/{q(vh)}/other-s", json={})
        assert r.status_code == 401
        assert r.json()["reason"] == (
            f"access to queue 'other-s' in vhost '{vh}' refused for user 'alice'"
        )
        assert alice.get("/api/queues/%2F").status_code == 401
    with client(server) as http:
        assert http.delete(f"/api/vhosts/{q(vh)}").status_code == 204
        assert http.get(f"/api/vhosts/{q(vh)}").status_code == 404
        assert http.delete("/api/users/alice").status_code == 204
        assert http.get("/api/users/alice").status_code == 404


def test_bad_bodies_change_nothing(server: ServerProcess, qname: str) -> None:
    with client(server) as http:
        r = http.put(
            f"/api/queues/%2F/{q(qname)}",
            content=b"{not json",
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 400 and r.json() == {"error": "bad_request", "reason": "not_json"}
        r = http.put(f"/api/queues/%2F/{q(qname)}", json={"arguments": "nope"})
        assert r.status_code == 400 and r.json()["error"] == "bad_request"
        huge = http.post("/api/definitions", content=b"x" * (21 * 1024 * 1024))
        assert huge.status_code == 413
        dots = http.put("/api/queues/%2F/..%2F..%2Fescape", json={})
        assert dots.status_code == 201  # a name like any other: stored under an escaped dir
        assert http.get(f"/api/queues/%2F/{q(qname)}").status_code == 404
        assert http.delete("/api/queues/%2F/..%2F..%2Fescape").status_code == 204


# ----------------------------------------------------------------------------- definitions


def test_definitions_from_rabbitmq_import_and_export(fresh_server: ServerProcess) -> None:
    server = fresh_server
    with client(server) as http:
        r = http.post("/api/definitions", json=RABBIT_DEFS)
        assert r.status_code == 204, r.text
        exported = http.get("/api/definitions").json()
        s1 = http.get("/api/queues/%2F/s1").json()
    # RabbitMQ's guest hash (of "guest") logs in here: the hash format is RabbitMQ's
    with client(server) as http:
        assert http.get("/api/whoami").status_code == 200
    assert [u["password_hash"] for u in exported["users"] if u["name"] == "guest"] == [
        RABBIT_DEFS["users"][0]["password_hash"]
    ]
    assert s1["arguments"] == RABBIT_DEFS["queues"][0]["arguments"]
    assert {q_["name"] for q_ in exported["queues"]} == {"s1", "s4"}
    for key in (
        "users",
        "vhosts",
        "permissions",
        "queues",
        "exchanges",
        "bindings",
        "policies",
        "parameters",
        "global_parameters",
        "topic_permissions",
    ):
        assert key in exported
    # export -> import into the same node is a no-op
    with client(server) as http:
        assert http.post("/api/definitions", json=exported).status_code == 204


def test_definitions_with_unsupported_objects_are_refused_whole(
    fresh_server: ServerProcess,
) -> None:
    server = fresh_server
    doc = json.loads(json.dumps(RABBIT_DEFS))
    doc["vhosts"].append({"name": "new-vh"})
    doc["queues"].append(
        {
            "name": "cq",
            "vhost": "/",
            "durable": True,
            "auto_delete": False,
            "arguments": {"x-queue-type": "mqtt-qos0"},
        }
    )
    doc["parameters"] = [
        {"vhost": "/", "component": "shovel", "name": "s", "value": {"src-uri": "amqp://"}}
    ]
    with client(server) as http:
        r = http.post("/api/definitions", json=doc)
        vhosts = [v["name"] for v in http.get("/api/vhosts").json()]
        queues = http.get("/api/queues").json()
        bad_json = http.post("/api/definitions", content=b"[1,")
    assert r.status_code == 400
    reason = r.json()["reason"]
    assert "parameters of component 'shovel' (1)" in reason and "'cq'" in reason
    assert vhosts == ["/"] and queues == []  # nothing half-applied
    assert bad_json.status_code == 400

"""Vhost and user limits: RabbitMQ's HTTP endpoints and their enforcement on AMQP, with the
answers and reply texts a real RabbitMQ 3.10.8 gave (captured 2026-11-24 with its
management plugin on 127.0.0.1, quoted here)."""

from __future__ import annotations

import pika
import pika.exceptions
import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import client, q


def amqp(server: ServerProcess, vhost: str = "/", user: str = "guest", pw: str = "guest"):  # type: ignore[no-untyped-def]
    return pika.BlockingConnection(
        pika.URLParameters(f"amqp://{user}:{pw}@{server.host}:{server.amqp_port}/{q(vhost)}")
    )


def test_vhost_limits_endpoints(fresh_server: ServerProcess) -> None:
    with client(fresh_server) as http:
        http.put("/api/vhosts/lim")
        assert http.put("/api/vhost-limits/lim/max-queues", json={"value": 1}).status_code == 204
        assert (
            http.put("/api/vhost-limits/lim/max-connections", json={"value": 1}).status_code == 204
        )
        listed = http.get("/api/vhost-limits").json()
        one = http.get("/api/vhost-limits/lim").json()
        unknown = http.put("/api/vhost-limits/lim/max-bogus", json={"value": 1})
        not_number = http.put("/api/vhost-limits/lim/max-queues", json={"value": "x"})
        no_value = http.put("/api/vhost-limits/lim/max-queues", json={})
        no_vhost = http.get("/api/vhost-limits/nov")
        assert http.delete("/api/vhost-limits/lim/max-queues").status_code == 204
        assert http.delete("/api/vhost-limits/lim/max-queues").status_code == 204  # again
        after = http.get("/api/vhost-limits/lim").json()
    assert listed == [{"vhost": "lim", "value": {"max-queues": 1, "max-connections": 1}}]
    assert one == listed
    assert (unknown.status_code, unknown.json()["reason"]) == (
        400,
        'Validation failed\n\nUnrecognised terms [{<<"max-bogus">>,1}] in limits\n',
    )
    assert (not_number.status_code, not_number.json()["reason"]) == (
        400,
        'Validation failed\n\nmax-queues should be a number, actually was <<"x">>\n',
    )
    assert (no_value.status_code, no_value.json()["reason"]) == (400, "[{key_missing,value}]")
    assert no_vhost.status_code == 404
    assert after == [{"vhost": "lim", "value": {"max-connections": 1}}]


def test_vhost_limits_on_amqp_and_persisted(fresh_server: ServerProcess) -> None:
    with client(fresh_server) as http:
        http.put("/api/vhosts/lim")
        http.put(
            "/api/permissions/lim/guest", json={"configure": ".*", "write": ".*", "read": ".*"}
        )
        http.put("/api/vhost-limits/lim/max-queues", json={"value": 2})
        http.put("/api/vhost-limits/lim/max-connections", json={"value": 1})
    fresh_server.stop()  # the limits are stored with the definitions
    fresh_server.start()
    conn = amqp(fresh_server, "lim")
    ch = conn.channel()
    ch.queue_declare("q1")  # a classic queue
    ch.queue_declare("s1", durable=True, arguments={"x-queue-type": "stream"})
    ch.queue_declare("q1")  # redeclaring an existing queue is not a new one
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as queue_refused:
        ch.queue_declare("q2")
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as conn_refused:
        amqp(fresh_server, "lim")
    other = amqp(fresh_server, "/")  # another vhost is not limited
    other.close()
    conn.close()
    assert queue_refused.value.reply_code == 406
    assert queue_refused.value.reply_text == (
        "PRECONDITION_FAILED - cannot declare queue 'q2': queue limit in vhost 'lim' (2) is reached"
    )
    assert (
        "NOT_ALLOWED - access to vhost 'lim' refused for user 'guest': "
        "connection limit (1) is reached" in str(conn_refused.value)
    )
    # the connection slot is free again once the first one closed
    amqp(fresh_server, "lim").close()


def test_user_limits_on_amqp(fresh_server: ServerProcess) -> None:
    with client(fresh_server) as http:
        assert http.put("/api/user-limits/guest/max-channels", json={"value": 2}).status_code == 204
        assert http.get("/api/user-limits").json() == [
            {"user": "guest", "value": {"max-channels": 2}}
        ]
        assert http.get("/api/user-limits/nobody").status_code == 404
        assert http.put("/api/user-limits/guest/max-queues", json={"value": 1}).status_code == 400
    conn = amqp(fresh_server)
    conn.channel()
    conn.channel()
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as channel_refused:
        conn.channel()
    assert channel_refused.value.reply_code == 530
    assert channel_refused.value.reply_text == (
        "NOT_ALLOWED - number of channels opened for user 'guest' has reached the maximum "
        "allowed user limit of (2)"
    )
    with client(fresh_server) as http:
        http.delete("/api/user-limits/guest/max-channels")
        http.put("/api/user-limits/guest/max-connections", json={"value": 1})
    first = amqp(fresh_server)
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as conn_refused:
        amqp(fresh_server)
    first.close()
    assert (
        "NOT_ALLOWED - connection refused for user 'guest': user connection limit (1) is reached"
        in str(conn_refused.value)
    )
    with client(fresh_server) as http:
        exported = http.get("/api/definitions").json()
        http.put("/api/user-limits/guest/max-connections", json={"value": -1})  # -1: none
    assert [u["limits"] for u in exported["users"] if u["name"] == "guest"] == [
        {"max-connections": 1}
    ]
    amqp(fresh_server).close()
    amqp(fresh_server).close()


def test_limits_need_administrator(fresh_server: ServerProcess) -> None:
    with client(fresh_server) as http:
        http.put("/api/users/mon", json={"password": "pw", "tags": "monitoring"})
    with client(fresh_server, "mon", "pw") as http:
        assert http.get("/api/vhost-limits").status_code == 200
        assert http.put("/api/vhost-limits/%2F/max-queues", json={"value": 1}).status_code == 401
        assert http.get("/api/user-limits").status_code == 401

"""RabbitMQ's permission model on AMQP (pika) and HTTP, with RabbitMQ's refusal texts; the
first administrator from --default-user/--default-pass or the environment; --definitions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pika
import pika.exceptions
import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import client


def as_user(server: ServerProcess, user: str, pw: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            host=server.host,
            port=server.amqp_port,
            credentials=pika.PlainCredentials(user, pw),
        )
    )


def refused(fn: object, *args: object, **kwargs: object) -> str:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        fn(*args, **kwargs)  # type: ignore[operator]
    assert info.value.reply_code == 403
    return str(info.value.reply_text)


@pytest.fixture(scope="module")
def bob(server: ServerProcess) -> str:
    with client(server) as http:
        assert http.put("/api/users/bob", json={"password": "pw", "tags": ""}).status_code == 201
        r = http.put(
            "/api/permissions/%2F/bob",
            json={"configure": "^bob-", "write": "^bob-|^amq\\.default$", "read": "^bob-"},
        )
        assert r.status_code == 201
        for name in ("other-s", "bob-s"):
            http.put(f"/api/queues/%2F/{name}", json={})
        http.put("/api/exchanges/%2F/other-x", json={"type": "fanout"})
    return "bob"


def text(what: str, name: str) -> str:
    return f"ACCESS_REFUSED - access to {what} '{name}' in vhost '/' refused for user 'bob'"


def test_configure_is_needed_to_declare_and_delete(server: ServerProcess, bob: str) -> None:
    conn = as_user(server, "bob", "pw")
    ch = conn.channel()
    ch.queue_declare("bob-q1", durable=True, arguments={"x-queue-type": "stream"})
    ch.exchange_declare("bob-x", "topic")
    ch.queue_declare("other-s", passive=True)  # passive declares check nothing
    assert refused(
        ch.queue_declare, "not-bob", durable=True, arguments={"x-queue-type": "stream"}
    ) == text("queue", "not-bob")
    ch = conn.channel()
    assert refused(ch.exchange_declare, "evil-x", "topic") == text("exchange", "evil-x")
    ch = conn.channel()
    assert refused(ch.queue_delete, "other-s") == text("queue", "other-s")
    ch = conn.channel()
    ch.queue_delete("bob-q1")
    conn.close()


def test_write_read_on_publish_consume_and_bind(server: ServerProcess, bob: str) -> None:
    conn = as_user(server, "bob", "pw")
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish("", "bob-s", b"ok")  # write on amq.default
    assert refused(ch.basic_publish, "other-x", "k", b"no") == text("exchange", "other-x")
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1)
    assert refused(ch.basic_consume, "other-s", lambda *a: None) == text("queue", "other-s")
    ch = conn.channel()
    # queue.bind: write on the queue, read on the exchange
    assert refused(ch.queue_bind, "bob-s", "other-x") == text("exchange", "other-x")
    ch = conn.channel()
    assert refused(ch.queue_bind, "other-s", "amq.fanout") == text("queue", "other-s")
    conn.close()
    # guest, with .* everywhere, may do all of it
    conn = pika.BlockingConnection(
        pika.URLParameters(f"amqp://guest:guest@{server.host}:{server.amqp_port}/%2F")
    )
    ch = conn.channel()
    ch.queue_bind("other-s", "other-x")
    conn.close()


def test_http_uses_the_same_rules(server: ServerProcess, bob: str) -> None:
    with client(server) as http:
        http.put("/api/users/bobm", json={"password": "pw", "tags": "management"})
        http.put(
            "/api/permissions/%2F/bobm",
            json={"configure": "^bob-", "write": "^bob-", "read": "^bob-"},
        )
    with client(server, "bobm", "pw") as m:
        assert m.put("/api/queues/%2F/bob-http", json={}).status_code == 201
        r = m.put("/api/queues/%2F/x-http", json={})
        assert r.status_code == 401 and r.json() == {
            "error": "not_authorised",
            "reason": "access to queue 'x-http' in vhost '/' refused for user 'bobm'",
        }
        r = m.post(
            "/api/exchanges/%2F/amq.default/publish",
            json={
                "routing_key": "bob-http",
                "payload": "x",
                "payload_encoding": "string",
                "properties": {},
            },
        )
        assert r.status_code == 401  # write on amq.default is not in ^bob-
        assert m.get("/api/streams/%2F/other-s/messages").status_code == 401
        assert m.get("/api/users").status_code == 401
        assert m.delete("/api/queues/%2F/bob-http").status_code == 204
    with client(server, "bob", "pw") as plain:  # no tag: no HTTP API at all
        assert plain.get("/api/whoami").status_code == 401


def test_guest_is_loopback_only_and_default_user_from_env(tmp_path: Path) -> None:
    env_before = dict(os.environ)
    os.environ["RABBITMQ_DEFAULT_USER"] = "admin"
    os.environ["RABBITMQ_DEFAULT_PASS"] = "s3cret"
    try:
        server = ServerProcess(tmp_path / "data").start()
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    try:
        with client(server, "admin", "s3cret") as http:
            assert http.get("/api/whoami").json() == {"name": "admin", "tags": ["administrator"]}
            users = [u["name"] for u in http.get("/api/users").json()]
        assert users == ["admin"]  # no guest when another first user is named
        assert (
            httpx.get(server.admin_url + "/api/whoami", auth=("guest", "guest")).status_code == 401
        )
        stored = [p for p in (tmp_path / "data").rglob("*") if p.is_file()]
        assert stored and not [p for p in stored if b"s3cret" in p.read_bytes()]
    finally:
        assert server.stop() == 0


def test_definitions_file_at_boot(tmp_path: Path) -> None:
    defs = json.loads((Path(__file__).parent / "rabbitmq_3_10_8_definitions.json").read_text())
    path = tmp_path / "defs.json"
    path.write_text(json.dumps(defs))
    server = ServerProcess(tmp_path / "data", extra_args=("--definitions", str(path))).start()
    try:
        with client(server) as http:
            names = sorted(q["name"] for q in http.get("/api/queues").json())
        assert names == ["s1", "s4"]
    finally:
        assert server.stop() == 0
    bad = tmp_path / "bad.json"
    defs["queues"].append({"name": "c", "vhost": "/", "arguments": {"x-queue-type": "mqtt-qos0"}})
    bad.write_text(json.dumps(defs))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sievemq",
            "serve",
            "--data-dir",
            str(tmp_path / "d2"),
            "--amqp-port",
            "0",
            "--admin-port",
            "0",
            "--stream-port",
            "0",
            "--definitions",
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1
    assert "queue 'c' in vhost '/' of type 'mqtt-qos0'" in proc.stderr


def test_users_and_permissions_survive_a_restart(fresh_server: ServerProcess) -> None:
    server = fresh_server
    with client(server) as http:
        assert http.put("/api/users/dora", json={"password": "pw", "tags": "management"})
        r = http.put(
            "/api/permissions/%2F/dora", json={"configure": "^d-", "write": ".*", "read": ".*"}
        )
        assert r.status_code == 201
    assert server.stop() == 0
    server.start()
    with client(server, "dora", "pw") as dora:
        assert dora.get("/api/whoami").json() == {"name": "dora", "tags": ["management"]}
    with client(server) as http:
        perms = http.get("/api/users/dora/permissions").json()
    assert perms == [
        {"user": "dora", "vhost": "/", "configure": "^d-", "write": ".*", "read": ".*"}
    ]

"""A vhost's description, tags and default queue type (RabbitMQ 3.11+'s vhost metadata): the
PUT takes and checks them, GET reports them, the definitions carry them through export,
import and a restart, and a queue declared without x-queue-type gets the vhost's type."""

from __future__ import annotations

import pika

from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import client


def test_vhost_metadata_put_get_update_and_refusals(fresh_server: ServerProcess) -> None:
    body = {"description": "orders", "tags": "eu, prod", "default_queue_type": "quorum"}
    with client(fresh_server) as http:
        created = http.put("/api/vhosts/meta", json=body)
        got = http.get("/api/vhosts/meta").json()
        default = http.get("/api/vhosts/%2F").json()
        plain = http.put("/api/vhosts/plain")
        plain_got = http.get("/api/vhosts/plain").json()
        updated = http.put("/api/vhosts/meta", json={"description": "orders v2", "tags": ["eu"]})
        after = http.get("/api/vhosts/meta").json()
        bad_type = http.put("/api/vhosts/meta", json={"default_queue_type": "mqtt"})
        bad_tags = http.put("/api/vhosts/meta", json={"tags": 5})
        bad_description = http.put("/api/vhosts/meta", json={"description": ["x"]})
        unchanged = http.get("/api/vhosts/meta").json()
        new_bad = http.put("/api/vhosts/never", json={"default_queue_type": "lazy"})
        never = http.get("/api/vhosts/never")
    assert created.status_code == 201
    assert (got["description"], got["tags"], got["default_queue_type"]) == (
        "orders",
        ["eu", "prod"],
        "quorum",
    )
    assert got["metadata"] == {
        "description": "orders",
        "tags": ["eu", "prod"],
        "default_queue_type": "quorum",
    }
    # the server's default queue type is classic (not the stream validator's default)
    assert default["default_queue_type"] == "classic"
    assert default["description"] == "Default virtual host"
    assert plain.status_code == 201
    assert (plain_got["description"], plain_got["tags"], plain_got["default_queue_type"]) == (
        "",
        [],
        "classic",
    )
    # a PUT on an existing vhost updates what it gives, and keeps the rest
    assert updated.status_code == 204
    assert after["metadata"] == {
        "description": "orders v2",
        "tags": ["eu"],
        "default_queue_type": "quorum",
    }
    assert bad_type.status_code == 400 and "'mqtt'" in bad_type.json()["reason"]
    assert bad_tags.status_code == 400 and "5" in bad_tags.json()["reason"]
    assert bad_description.status_code == 400 and "['x']" in bad_description.json()["reason"]
    assert unchanged["metadata"] == after["metadata"]
    assert new_bad.status_code == 400 and "'lazy'" in new_bad.json()["reason"]
    assert never.status_code == 404  # a refused PUT creates nothing


def test_vhost_metadata_export_import_and_restart(fresh_server: ServerProcess) -> None:
    body = {"description": "stream land", "tags": ["a", "b"], "default_queue_type": "stream"}
    with client(fresh_server) as http:
        assert http.put("/api/vhosts/sv", json=body).status_code == 201
        exported = http.get("/api/definitions").json()
        assert http.delete("/api/vhosts/sv").status_code == 204
        imported = http.post("/api/definitions", json=exported)
        after_import = http.get("/api/vhosts/sv").json()
        # a RabbitMQ 3.11+ export keeps them under metadata
        doc = {
            "vhosts": [
                {
                    "name": "rq",
                    "metadata": {
                        "description": "from rabbit",
                        "tags": ["x"],
                        "default_queue_type": "quorum",
                    },
                }
            ]
        }
        assert http.post("/api/definitions", json=doc).status_code == 204
        bad = http.post(
            "/api/definitions",
            json={"vhosts": [{"name": "bq", "default_queue_type": "fast"}]},
        )
        vhosts_after_bad = [v["name"] for v in http.get("/api/vhosts").json()]
    (sv,) = [v for v in exported["vhosts"] if v["name"] == "sv"]
    assert sv == {
        "name": "sv",
        "description": "stream land",
        "tags": ["a", "b"],
        "default_queue_type": "stream",
        "metadata": {
            "description": "stream land",
            "tags": ["a", "b"],
            "default_queue_type": "stream",
        },
    }
    assert imported.status_code == 204
    assert after_import["metadata"] == sv["metadata"]
    assert bad.status_code == 400 and "'fast'" in bad.json()["reason"]
    assert "bq" not in vhosts_after_bad
    fresh_server.stop()
    fresh_server.start()
    with client(fresh_server) as http:
        sv_after = http.get("/api/vhosts/sv").json()
        rq_after = http.get("/api/vhosts/rq").json()
        root = http.get("/api/vhosts/%2F").json()
    assert sv_after["metadata"] == sv["metadata"]
    assert rq_after["metadata"] == doc["vhosts"][0]["metadata"]
    assert root["description"] == "Default virtual host"


def test_queue_without_type_gets_the_vhost_default(fresh_server: ServerProcess) -> None:
    with client(fresh_server) as http:
        for vhost, kind in (("vq", "quorum"), ("vs", "stream"), ("vc", "classic")):
            assert (
                http.put(f"/api/vhosts/{vhost}", json={"default_queue_type": kind}).status_code
                == 201
            )
            http.put(
                f"/api/permissions/{vhost}/guest",
                json={"configure": ".*", "write": ".*", "read": ".*"},
            )
    for vhost in ("vq", "vs", "vc"):
        conn = pika.BlockingConnection(
            pika.URLParameters(
                f"amqp://guest:guest@{fresh_server.host}:{fresh_server.amqp_port}/{vhost}"
            )
        )
        conn.channel().queue_declare("q", durable=True)
        conn.close()
    with client(fresh_server) as http:
        types = {v: http.get(f"/api/queues/{v}/q").json()["type"] for v in ("vq", "vs", "vc")}
        # the HTTP declare as well
        assert http.put("/api/queues/vq/h", json={"durable": True}).status_code == 201
        http_type = http.get("/api/queues/vq/h").json()["type"]
    assert types == {"vq": "quorum", "vs": "stream", "vc": "classic"}
    assert http_type == "quorum"

"""Every definition through etcd: three real nodes, a real etcd, pika and the HTTP API.

A vhost, a user with permissions, an exchange, a binding and a policy made on one node are
usable on the others (the user logs in there, a publish there routes by the binding, the
policy applies there); deleted on another node they are gone everywhere; an HTTP import
shows on all; a node stopped while definitions change catches up when restarted; etcd
restarted without its data gets every node's definitions again; with etcd away a change
fails with 541 naming etcd, and reaches the cluster once etcd is back.
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pika
import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.etcd import EtcdProcess

from .cluster_helpers import closed_with_541, cluster_args, etcd_away, get, until

NAMES = ("a", "b", "c")
ALICE = ("alice", "wonderland")


OPEN: list[pika.BlockingConnection] = []


@pytest.fixture(autouse=True)
def _close_connections() -> Iterator[None]:
    yield
    while OPEN:
        conn = OPEN.pop()
        if conn.is_open:
            with contextlib.suppress(pika.exceptions.AMQPError):  # its node was stopped
                conn.close()


def channel(
    node: ServerProcess, vhost: str = "/", user: tuple[str, str] = ("guest", "guest")
) -> Any:
    params = pika.ConnectionParameters(
        "127.0.0.1", node.amqp_port, vhost, pika.PlainCredentials(*user)
    )
    conn = pika.BlockingConnection(params)
    OPEN.append(conn)
    return conn.channel()


def can_log_in(node: ServerProcess, vhost: str, user: tuple[str, str]) -> bool:
    try:
        channel(node, vhost, user)
    except pika.exceptions.AMQPConnectionError:
        return False
    return True


def admin(node: ServerProcess, method: str, path: str, body: Any = None) -> httpx.Response:
    return httpx.request(
        method, node.admin_url + path, json=body, auth=("guest", "guest"), timeout=30
    )


def names(node: ServerProcess, path: str) -> set[str]:
    return {item["name"] for item in get(node, path)}


def etcd_keys(etcd: EtcdProcess, prefix: str) -> list[str]:
    """The keys etcd holds under ``prefix`` (its JSON gateway, as the nodes read it)."""
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    answer = httpx.post(
        etcd.url + "/v3/kv/range",
        json={"key": _b64(prefix), "range_end": _b64(end), "keys_only": True},
        timeout=10,
    ).json()
    return [base64.b64decode(kv["key"]).decode() for kv in answer.get("kvs", [])]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _bound(node: ServerProcess, source: str, queue: str, vhost: str = "shop") -> bool:
    bindings = get(node, "/api/bindings/" + quote(vhost, safe=""))
    return any(x["source"] == source and x["destination"] == queue for x in bindings)


def test_fresh_nodes_share_one_default_user_and_vhost(
    etcd: EtcdProcess, nodes: dict[str, ServerProcess]
) -> None:
    keys = etcd_keys(etcd, "sievemq/defs/")
    assert keys.count("sievemq/defs/users/guest") == 1
    assert "sievemq/defs/vhosts/%2F" in keys
    for node in nodes.values():
        assert can_log_in(node, "/", ("guest", "guest"))
        assert "definitions conflict" not in node.stderr()


def test_what_a_declares_is_usable_on_b_and_deleted_on_b_is_gone_on_a(
    nodes: dict[str, ServerProcess],
) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    began = time.monotonic()
    assert admin(a, "PUT", "/api/vhosts/shop").status_code == 201
    assert (
        admin(a, "PUT", "/api/users/alice", {"password": ALICE[1], "tags": ""}).status_code == 201
    )
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    assert admin(a, "PUT", "/api/permissions/shop/alice", everything).status_code == 201
    policy = {"pattern": "^capped", "definition": {"max-length": 3}, "apply-to": "queues"}
    assert admin(a, "PUT", "/api/policies/shop/cap", policy).status_code == 201
    # the user logs in on b and c, in the vhost made on a
    until(lambda: can_log_in(b, "shop", ALICE), "alice logs in on b")
    seen_after = time.monotonic() - began
    until(lambda: can_log_in(c, "shop", ALICE), "alice logs in on c")
    print(f"a vhost, user, permission and policy made on a: usable on b after {seen_after:.2f} s")

    # a queue b leads; an exchange and a binding to that queue declared on a
    on_b = channel(b, "shop", ALICE)
    on_b.queue_declare("capped-orders", durable=True)
    on_a = channel(a, "shop", ALICE)
    until(lambda: "capped-orders" in names(a, "/api/queues/shop"), "a knows b's queue")
    on_a.exchange_declare("orders", "topic", durable=True)
    on_a.queue_bind("capped-orders", "orders", routing_key="eu.#")
    on_a.exchange_declare("scratch", "fanout", durable=False)  # transient: stays on a

    # a publish on b routes by the binding made on a; the policy made on a applies on b
    def bound_on_b() -> bool:
        return any(
            x["source"] == "orders" and x["routing_key"] == "eu.#"
            for x in get(b, "/api/bindings/shop")
        )

    until(bound_on_b, "b has the binding made on a")
    on_b.confirm_delivery()
    for i in range(5):
        on_b.basic_publish("orders", "eu.paris", f"order {i}".encode())
    queue = get(b, "/api/queues/shop/capped-orders")
    assert queue["policy"] == "cap"
    assert queue["messages"] == 3  # max-length 3: the oldest two dropped
    method, _, body = on_b.basic_get("capped-orders", auto_ack=True)
    assert method is not None and body == b"order 2"
    assert "scratch" in names(a, "/api/exchanges/shop")
    assert "scratch" not in names(b, "/api/exchanges/shop")
    # an exclusive queue's binding stays on its node too (b writes in order: once a has
    # what b made next, it would have had the binding)
    on_b.queue_declare("private", exclusive=True)
    on_b.queue_bind("private", "orders", routing_key="eu.#")
    on_b.exchange_declare("after-private", "direct", durable=True)
    until(lambda: "after-private" in names(a, "/api/exchanges/shop"), "a has b's exchange")
    assert not _bound(a, "orders", "private") and _bound(b, "orders", "private")

    # deleted through b: gone on a (and c)
    on_b.queue_unbind("capped-orders", "orders", routing_key="eu.#")
    on_b.exchange_delete("orders")
    assert admin(b, "DELETE", "/api/policies/shop/cap").status_code == 204
    until(lambda: "orders" not in names(a, "/api/exchanges/shop"), "a forgets the exchange")
    until(lambda: not get(a, "/api/policies/shop"), "a forgets the policy")
    assert not [x for x in get(a, "/api/bindings/shop") if x["source"] == "orders"]
    # a queue deleted on its leader: its bindings go on every node
    on_a.queue_bind("capped-orders", "amq.topic", routing_key="stock.#")
    until(lambda: _bound(c, "amq.topic", "capped-orders"), "c has the binding made on a")
    on_b.queue_delete("capped-orders")
    until(lambda: not _bound(a, "amq.topic", "capped-orders"), "a forgets the binding")
    until(lambda: not _bound(c, "amq.topic", "capped-orders"), "c forgets the binding")
    assert admin(b, "DELETE", "/api/users/alice").status_code == 204
    until(lambda: "alice" not in names(a, "/api/users"), "a forgets alice")
    until(lambda: not can_log_in(c, "shop", ALICE), "alice cannot log in on c any more")


def test_an_http_import_on_one_node_shows_on_all(nodes: dict[str, ServerProcess]) -> None:
    imported = {
        "vhosts": [{"name": "imported"}],
        "users": [{"name": "bob", "password": "builder", "tags": "management"}],
        "permissions": [
            {"user": "bob", "vhost": "imported", "configure": ".*", "write": ".*", "read": ""}
        ],
        "exchanges": [
            {"name": "in", "vhost": "imported", "type": "fanout", "durable": True},
            {"name": "out", "vhost": "imported", "type": "topic", "durable": True},
        ],
        "bindings": [
            {
                "source": "in",
                "vhost": "imported",
                "destination": "out",
                "destination_type": "exchange",
                "routing_key": "",
                "arguments": {},
            }
        ],
        "policies": [
            {
                "vhost": "imported",
                "name": "ttl",
                "pattern": ".*",
                "apply-to": "queues",
                "definition": {"message-ttl": 60000},
            }
        ],
        "global_parameters": [{"name": "region", "value": "eu-west"}],
    }
    assert admin(nodes["c"], "POST", "/api/definitions", imported).status_code in (200, 201, 204)
    for name, node in nodes.items():
        exported = until(
            lambda: (
                (d := admin(node, "GET", "/api/definitions").json())  # noqa: B023
                and any(b["destination"] == "out" for b in d["bindings"])
                and d
            ),
            f"{name} has the imported definitions",
        )
        assert "imported" in {v["name"] for v in exported["vhosts"]}
        assert {"in", "out"} <= {x["name"] for x in exported["exchanges"]}
        assert any(p["user"] == "bob" and p["read"] == "" for p in exported["permissions"])
        assert {p["name"] for p in exported["policies"]} == {"ttl"}
        assert {"name": "region", "value": "eu-west"} in exported["global_parameters"]
    assert can_log_in(nodes["a"], "imported", ("bob", "builder"))


def test_the_cluster_name_is_set_through_etcd(nodes: dict[str, ServerProcess]) -> None:
    assert admin(nodes["b"], "PUT", "/api/cluster-name", {"name": "rabbits"}).status_code == 204
    for name, node in nodes.items():
        until(
            lambda: get(node, "/api/overview")["cluster_name"] == "rabbits",  # noqa: B023
            f"{name}'s overview names the cluster",
        )


def test_a_stopped_node_catches_up_when_restarted(nodes: dict[str, ServerProcess]) -> None:
    a, c = nodes["a"], nodes["c"]
    assert admin(c, "PUT", "/api/vhosts/doomed").status_code == 201
    until(lambda: "doomed" in names(a, "/api/vhosts"), "a has c's vhost")
    channel(a).queue_declare("kept", durable=True)  # led by a, bound through c
    until(lambda: "kept" in names(c, "/api/queues/%2F"), "c knows a's queue")
    channel(c).queue_bind("kept", "amq.direct", routing_key="k")
    until(lambda: _bound(a, "amq.direct", "kept", "/"), "a has the binding made on c")
    assert c.stop() == 0
    assert admin(a, "DELETE", "/api/vhosts/doomed").status_code == 204
    assert admin(a, "PUT", "/api/vhosts/while-away").status_code == 201
    channel(a).exchange_declare("late-news", "direct", durable=True)
    c.start()
    vhosts = names(c, "/api/vhosts")
    assert "while-away" in vhosts and "doomed" not in vhosts
    assert "late-news" in names(c, "/api/exchanges/%2F")
    assert _bound(c, "amq.direct", "kept", "/")  # its binding to a queue a leads is back
    assert "dropping stored binding" not in c.stderr()
    # and c's own changes still go through etcd after its restart
    channel(c).exchange_declare("from-c", "direct", durable=True)
    until(lambda: "from-c" in names(a, "/api/exchanges/%2F"), "a has c's new exchange")


def test_a_definitions_file_given_at_start_reaches_every_node(
    etcd: EtcdProcess, nodes: dict[str, ServerProcess], tmp_path: Path
) -> None:
    path = tmp_path / "definitions.json"
    path.write_text(json.dumps({"vhosts": [{"name": "from-file"}]}))
    extra = ServerProcess(tmp_path / "d", (*cluster_args(etcd, "d"), "--definitions", str(path)))
    extra.start()
    try:
        until(lambda: "from-file" in names(nodes["a"], "/api/vhosts"), "a has d's file's vhost")
        assert extra.stop() == 0
        # restarted (it has reconciled before: etcd is the truth) with a file that says more
        path.write_text(json.dumps({"vhosts": [{"name": "from-file"}, {"name": "file-2"}]}))
        extra.start()
        until(lambda: "file-2" in names(nodes["b"], "/api/vhosts"), "b has the file's new vhost")
        assert "file-2" in names(extra, "/api/vhosts")
    finally:
        if extra.running:
            assert extra.stop() == 0, extra.stderr()


def test_a_change_fails_with_541_naming_etcd_while_it_is_away(
    etcd: EtcdProcess, nodes: dict[str, ServerProcess]
) -> None:
    on_a = channel(nodes["a"])
    with etcd_away(etcd):
        closed_with_541(
            lambda: on_a.exchange_declare("unrecorded", "direct", durable=True),
            "etcd did not record exchange 'unrecorded'",
        )
        answer = admin(nodes["a"], "PUT", "/api/vhosts/unrecorded-too")
        assert answer.status_code == 500
        assert "etcd did not record vhost 'unrecorded-too'" in answer.json()["reason"]
    # made on a meanwhile: in the cluster once etcd answers
    b = nodes["b"]
    until(lambda: "unrecorded" in names(b, "/api/exchanges/%2F"), "b gets the exchange")
    until(lambda: "unrecorded-too" in names(b, "/api/vhosts"), "b gets the vhost")


def test_etcd_restarted_without_its_data_gets_every_nodes_definitions_again(
    etcd: EtcdProcess, nodes: dict[str, ServerProcess]
) -> None:
    etcd.stop()
    etcd.start(wipe=True)
    wanted = {
        "sievemq/defs/vhosts/while-away",
        "sievemq/defs/users/bob",
        "sievemq/defs/exchanges/%2F/late-news",
        "sievemq/defs/global_parameters/cluster_name",
    }
    until(
        lambda: wanted <= set(etcd_keys(etcd, "sievemq/defs/")),
        "the nodes offer their definitions again",
    )
    # and the mirror works on (etcd's revisions started again from 1): a new object and a
    # change of one that was there before, made on b, reach a
    channel(nodes["b"]).exchange_declare("after-wipe", "direct", durable=True)
    until(lambda: "after-wipe" in names(nodes["a"], "/api/exchanges/%2F"), "a gets it")
    bob = {"password": "builder", "tags": "monitoring"}
    assert admin(nodes["b"], "PUT", "/api/users/bob", bob).status_code == 204
    until(lambda: get(nodes["a"], "/api/users/bob")["tags"] == ["monitoring"], "a gets bob's")


def test_no_node_logged_an_error(nodes: dict[str, ServerProcess]) -> None:
    for name, node in nodes.items():
        assert "Traceback" not in node.stderr(), f"{name}: {node.stderr()}"
        assert "cannot apply" not in node.stderr(), f"{name}: {node.stderr()}"

"""Policies, operator policies, runtime and global parameters over RabbitMQ's HTTP API, and
their effect on queues and streams over AMQP (pika). The expected answers and texts are what
a RabbitMQ 3.10.8 with its management plugin answered (captured 2026-11-24 on 127.0.0.1)."""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pika
import pika.exceptions
import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import client, q

with warnings.catch_warnings():  # pyrabbit2 1.0.7's docstrings hold invalid escapes
    warnings.simplefilter("ignore", DeprecationWarning)
    from pyrabbit2.api import Client


@pytest.fixture
def channel(server: ServerProcess) -> Iterator[Any]:
    conn = pika.BlockingConnection(
        pika.ConnectionParameters(server.host, server.amqp_port, heartbeat=0)
    )
    channel = conn.channel()
    channel.confirm_delivery()  # publishes are in their queue before the next command
    yield channel
    conn.close()


def _put(server: ServerProcess, path: str, body: Any) -> Any:
    with client(server) as http:
        return http.put(path, json=body)


def _queue(server: ServerProcess, name: str) -> dict[str, Any]:
    with client(server) as http:
        got: dict[str, Any] = http.get(f"/api/queues/%2F/{q(name)}").json()
        return got


def _count(channel: Any, name: str) -> int:
    return int(channel.queue_declare(name, passive=True).method.message_count)


def _publish(channel: Any, name: str, n: int, body: bytes = b"m") -> None:
    for i in range(n):
        channel.basic_publish("", name, body + str(i).encode())


# ------------------------------------------------------------------------------ the HTTP API


def test_policy_endpoints_shapes_and_codes(server: ServerProcess, qname: str) -> None:
    p = f"/api/policies/%2F/{qname}"
    body = {"pattern": f"^{qname}", "definition": {"max-length": 10}, "priority": 1}
    with client(server) as http:
        created = http.put(p, json=body | {"apply-to": "queues"})
        again = http.put(p, json=body | {"apply-to": "queues", "foo": 1})  # extra keys ignored
        one = http.get(p).json()
        listed = http.get("/api/policies").json()
        in_vhost = http.get("/api/policies/%2F").json()
        missing = http.get("/api/policies/%2F/nope")
        no_vhost_get = http.get("/api/policies/nov")
        no_vhost_put = http.put("/api/policies/nov/x", json=body)
        deleted = http.delete(p)
        deleted_again = http.delete(p)
        after = http.get(p)
    assert (created.status_code, again.status_code) == (201, 204)
    assert one == {
        "vhost": "/",
        "name": qname,
        "pattern": f"^{qname}",
        "apply-to": "queues",
        "definition": {"max-length": 10},
        "priority": 1,
    }
    assert one in listed and one in in_vhost
    assert missing.status_code == 404 and missing.json() == {
        "error": "Object Not Found",
        "reason": "Not Found",
    }
    assert no_vhost_get.status_code == 404
    assert (no_vhost_put.status_code, no_vhost_put.json()) == (
        404,
        {"error": "not_found", "reason": "vhost_not_found"},
    )
    assert (deleted.status_code, deleted_again.status_code, after.status_code) == (204, 404, 404)


ESC = "&lt;&lt;"  # RabbitMQ 3.10 escapes << and >> in a refused policy's reason
END = "&gt;&gt;"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (
            {"pattern": "^q", "definition": {"foo": 1}, "priority": 1},
            f'Validation failed\n\n[{{{ESC}"foo"{END},1}}] are not recognised policy settings\n',
        ),
        (
            {"pattern": "^q", "definition": {"max-length": "x"}},
            f'Validation failed\n\n{ESC}"x"{END} is not a valid maximum length\n',
        ),
        (
            {"pattern": "^q", "definition": {"max-length": -1, "expires": 0}},
            "Validation failed\n\n0 is not a valid queue expiry\n",
        ),
        ({"pattern": "^q", "definition": {}}, "Validation failed\n\nno policy provided\n"),
        (
            {"pattern": "q", "definition": {"max-length": 1}, "priority": "x"},
            f'Validation failed\n\npriority should be a number, actually was {ESC}"x"{END}\n',
        ),
        ({"definition": {"max-length": 1}}, "[{key_missing,pattern}]"),
        ({"pattern": "q"}, "[{key_missing,definition}]"),
        (
            {"pattern": 1, "definition": {"max-length": 1}},
            "Validation failed\n\npattern should be a binary but was 1\n",
        ),
        (
            {"pattern": "q", "definition": {"max-length": 1.5}},
            "Validation failed\n\n1.5 is not a valid maximum length\n",
        ),
        (
            {"pattern": "q", "definition": {"max-length": True}},
            "Validation failed\n\ntrue is not a valid maximum length\n",
        ),
        (
            {"pattern": "q", "definition": {"dead-letter-exchange": 5}},
            "Validation failed\n\n5 is not a valid dead letter exchange name\n",
        ),
        (
            {"pattern": "q", "definition": {"overflow": "x", "max-age": "1Z"}},
            f'Validation failed\n\n{ESC}"1Z"{END} is not a valid max age\n',
        ),
        (
            {"pattern": "q", "definition": {"stream-max-segment-size-bytes": -5}},
            "Validation failed\n\n-5 is not a valid segment size\n",
        ),
        (
            {"pattern": "q", "definition": {"overflow": "x"}},
            f'Validation failed\n\n{ESC}"x"{END} is not a valid overflow value\n',
        ),
        (
            {"pattern": "q", "definition": {"message-ttl": -1}},
            "Validation failed\n\n-1 is not a valid message TTL\n",
        ),
        (
            {"pattern": "q", "definition": {"delivery-limit": -1}},
            "Validation failed\n\n-1 is not a valid delivery limit\n",
        ),
        (
            {"pattern": "q", "definition": {"dead-letter-routing-key": 1}},
            "Validation failed\n\n1 is not a valid dead letter routing key\n",
        ),
        (
            {"pattern": "q", "definition": {"max-length-bytes": -1}},
            "Validation failed\n\n-1 is not a valid maximum length in bytes\n",
        ),
        (
            {"pattern": "q", "definition": {"max-segment-size": 1}},
            f'Validation failed\n\n[{{{ESC}"max-segment-size"{END},1}}] are not '
            "recognised policy settings\n",
        ),
    ],
)
def test_policy_refusals_as_rabbitmq(server: ServerProcess, body: Any, reason: str) -> None:
    with client(server) as http:
        r = http.put("/api/policies/%2F/refused", json=body)
        stored = http.get("/api/policies/%2F/refused")
    assert (r.status_code, r.json()) == (400, {"error": "bad_request", "reason": reason})
    assert stored.status_code == 404  # nothing stored


def test_policy_refusals_sievemq_words(server: ServerProcess) -> None:
    """Where RabbitMQ 3.10 answers 500 or has no such value, SieveMQ answers 400 naming it."""
    with client(server) as http:
        bad_regex = http.put("/api/policies/%2F/x", json={"pattern": "(", "definition": {"a": 1}})
        bad_apply = http.put(
            "/api/policies/%2F/x", json={"pattern": "q", "definition": {}, "apply-to": "foo"}
        )
        not_dict = http.put("/api/policies/%2F/x", json={"pattern": "q", "definition": [1]})
        bad_age = http.put(
            "/api/policies/%2F/x", json={"pattern": "q", "definition": {"max-age": 5}}
        )
        not_json = http.put("/api/policies/%2F/x", content=b"xx")
    assert bad_regex.status_code == 400
    assert bad_regex.json()["reason"].startswith(
        "Validation failed\n\npattern should be regular expression but is invalid: "
    )
    assert bad_apply.status_code == 400 and "apply-to 'foo' unrecognised" in bad_apply.text
    assert "'streams'" in bad_apply.text
    assert not_dict.status_code == 400 and "definition must be a dictionary" in not_dict.text
    assert bad_age.json()["reason"] == "Validation failed\n\n5 is not a valid max age\n"
    assert (not_json.status_code, not_json.json()["reason"]) == (400, "not_json")


def test_operator_policy_endpoints(server: ServerProcess, qname: str) -> None:
    p = f"/api/operator-policies/%2F/{qname}"
    with client(server) as http:
        refused = http.put(
            p,
            json={"pattern": "^q", "definition": {"max-length": 5, "overflow": "drop-head"}},
        )
        created = http.put(
            p,
            json={
                "pattern": f"^{qname}",
                "definition": {"max-length": 5, "message-ttl": 500},
                "apply-to": "queues",
            },
        )
        one = http.get(p).json()
        as_parameter = http.get(f"/api/parameters/operator_policy/%2F/{qname}").json()
        params = http.get("/api/parameters").json()
        assert http.delete(p).status_code == 204
        gone = http.get(f"/api/parameters/operator_policy/%2F/{qname}")
    assert (refused.status_code, refused.json()["reason"]) == (
        400,  # not escaped on this path, as RabbitMQ
        'Validation failed\n\n[{<<"overflow">>,<<"drop-head">>}] are not recognised policy '
        "settings\n",
    )
    assert created.status_code == 201
    assert one == {
        "vhost": "/",
        "name": qname,
        "pattern": f"^{qname}",
        "apply-to": "queues",
        "definition": {"max-length": 5, "message-ttl": 500},
        "priority": 0,
    }
    assert as_parameter == {
        "value": {
            "pattern": f"^{qname}",
            "definition": {"max-length": 5, "message-ttl": 500},
            "priority": 0,
            "apply-to": "queues",
        },
        "vhost": "/",
        "component": "operator_policy",
        "name": qname,
    }
    assert as_parameter in params
    assert gone.status_code == 404


def test_runtime_and_global_parameters(server: ServerProcess, qname: str) -> None:
    with client(server) as http:
        http.put(f"/api/vhosts/{qname}")
        shovel = http.put(f"/api/parameters/shovel/{qname}/x", json={"value": {"src-uri": "a"}})
        federation = http.put(
            f"/api/parameters/federation-upstream/{qname}/x", json={"value": {"uri": "a"}}
        )
        policy = http.put(
            f"/api/parameters/policy/{qname}/x",
            json={"value": {"pattern": "q", "definition": {"max-length": 1}}},
        )
        shovels = http.get("/api/parameters/shovel").json()
        shovel_get = http.get(f"/api/parameters/shovel/{qname}/x")
        shovel_delete = http.delete(f"/api/parameters/shovel/{qname}/x")
        limits = http.put(
            f"/api/parameters/vhost-limits/{qname}/limits", json={"value": {"max-queues": 3}}
        )
        limit_view = http.get(f"/api/vhost-limits/{qname}").json()
        limit_param = http.get(f"/api/parameters/vhost-limits/{qname}").json()
        no_value = http.put(f"/api/parameters/vhost-limits/{qname}/limits", json={"x": 1})
        assert http.delete(f"/api/parameters/vhost-limits/{qname}/limits").status_code == 204
        no_limits = http.get(f"/api/vhost-limits/{qname}").json()

        g = f"/api/global-parameters/{qname}"
        g_created = http.put(g, json={"value": {"a": 1}})
        g_changed = http.put(g, json={"value": {"a": 2}})
        g_one = http.get(g).json()
        g_all = http.get("/api/global-parameters").json()
        g_no_value = http.put(g, json={"x": 1})
        g_deleted = http.delete(g)
        g_deleted_again = http.delete(g)
        g_missing = http.get(g)
        http.delete(f"/api/vhosts/{qname}")
    assert (shovel.status_code, shovel.json()["reason"]) == (
        400,
        "Validation failed\n\ncomponent shovel not found\n",
    )
    assert federation.json()["reason"] == (
        "Validation failed\n\ncomponent federation-upstream not found\n"
    )
    assert (policy.status_code, policy.json()["reason"]) == (
        400,
        "policies may not be set using this method",
    )
    assert shovels == []
    assert (shovel_get.status_code, shovel_delete.status_code) == (404, 404)
    assert limits.status_code == 201
    assert limit_view == [{"vhost": qname, "value": {"max-queues": 3}}]
    assert limit_param == [
        {"value": {"max-queues": 3}, "vhost": qname, "component": "vhost-limits", "name": "limits"}
    ]
    assert (no_value.status_code, no_value.json()["reason"]) == (400, "[{key_missing,value}]")
    assert no_limits == []
    assert (g_created.status_code, g_changed.status_code) == (201, 204)
    assert g_one == {"name": qname, "value": {"a": 2}}
    assert g_one in g_all
    assert (g_no_value.status_code, g_no_value.json()["reason"]) == (400, "[{key_missing,value}]")
    assert (g_deleted.status_code, g_deleted_again.status_code) == (204, 404)
    assert g_missing.status_code == 404


def test_who_may_change_policies(server: ServerProcess, qname: str) -> None:
    with client(server) as http:
        for user, tags in ((f"{qname}-pm", "policymaker"), (f"{qname}-mg", "management")):
            http.put(f"/api/users/{user}", json={"password": "pw", "tags": tags})
            http.put(
                f"/api/permissions/%2F/{user}",
                json={"configure": ".*", "write": ".*", "read": ".*"},
            )
        http.put(f"/api/vhosts/{qname}")
    body = {"pattern": f"^{qname}", "definition": {"max-length": 1}}
    with client(server, f"{qname}-pm", "pw") as pm:
        ok = pm.put(f"/api/policies/%2F/{qname}", json=body)
        other_vhost = pm.put(f"/api/policies/{qname}/{qname}", json=body)
        operator = pm.put(f"/api/operator-policies/%2F/{qname}", json=body)
        global_ = pm.get("/api/global-parameters")
        listed = [p["name"] for p in pm.get("/api/policies").json()]
        deleted = pm.delete(f"/api/policies/%2F/{qname}")
    with client(server, f"{qname}-mg", "pw") as mg:
        management = mg.put(f"/api/policies/%2F/{qname}", json=body)
    with client(server) as http:
        http.delete(f"/api/vhosts/{qname}")
        for user in (f"{qname}-pm", f"{qname}-mg"):
            http.delete(f"/api/users/{user}")
    assert (ok.status_code, deleted.status_code) == (201, 204)
    assert qname in listed
    assert other_vhost.status_code == 401
    assert operator.status_code == 401 and global_.status_code == 401
    assert management.status_code == 401


def test_pyrabbit2_policy_calls(server: ServerProcess, qname: str) -> None:
    rabbit = Client(f"127.0.0.1:{server.admin_port}", "guest", "guest", timeout=30)
    rabbit.create_policy(
        "/",
        qname,
        pattern=f"^{qname}",
        definition={"max-length": 2},
        priority=3,
        **{"apply-to": "classic_queues"},
    )
    got = rabbit.get_policy("/", qname)
    everything = rabbit.get_all_policies()
    rabbit.create_queue("/", qname, durable=True)
    shown = rabbit.get_queue("/", qname)
    rabbit.delete_queue("/", qname)
    rabbit.delete_policy("/", qname)
    assert got["definition"] == {"max-length": 2} and got["apply-to"] == "classic_queues"
    assert got in everything
    assert shown["policy"] == qname and shown["effective_policy_definition"] == {"max-length": 2}
    assert all(p["name"] != qname for p in rabbit.get_all_policies())


# ------------------------------------------------------------------------------ their effect


def test_max_length_policy_on_declare_change_and_removal(
    server: ServerProcess, channel: Any, qname: str
) -> None:
    _put(
        server,
        f"/api/policies/%2F/{qname}",
        {"pattern": f"^{qname}\\.", "definition": {"max-length": 2}},
    )
    name = f"{qname}.q"
    channel.queue_declare(name, durable=True)
    other = f"x{qname}"  # not matched: the pattern is anchored
    channel.queue_declare(other)
    _publish(channel, name, 5)
    _publish(channel, other, 5)
    assert (_count(channel, name), _count(channel, other)) == (2, 5)
    got = channel.basic_get(name, auto_ack=True)
    assert got[2] == b"m3"  # drop-head kept the newest two, m3 and m4
    _publish(channel, name, 1)
    # a lower limit on an existing queue drops its head at once
    _put(
        server,
        f"/api/policies/%2F/{qname}",
        {"pattern": f"^{qname}\\.", "definition": {"max-length": 1}},
    )
    assert _count(channel, name) == 1
    view = _queue(server, name)
    assert (view["policy"], view["effective_policy_definition"]) == (qname, {"max-length": 1})
    with client(server) as http:
        assert http.delete(f"/api/policies/%2F/{qname}").status_code == 204
    _publish(channel, name, 3)
    assert _count(channel, name) == 4  # no limit any more
    view = _queue(server, name)
    assert (view["policy"], view["effective_policy_definition"]) == (None, {})
    channel.queue_delete(name)
    channel.queue_delete(other)


def test_priority_operator_policy_and_arguments(
    server: ServerProcess, channel: Any, qname: str
) -> None:
    _put(
        server, f"/api/policies/%2F/{qname}-lo", {"pattern": qname, "definition": {"max-length": 1}}
    )
    _put(
        server,
        f"/api/policies/%2F/{qname}-hi",
        {"pattern": qname, "definition": {"max-length": 10, "message-ttl": 60000}, "priority": 5},
    )
    _put(
        server,
        f"/api/operator-policies/%2F/{qname}",
        {"pattern": qname, "definition": {"max-length": 6, "expires": 600000}},
    )
    plain, argued = f"{qname}-plain", f"{qname}-arg"
    channel.queue_declare(plain)
    channel.queue_declare(argued, arguments={"x-max-length": 3})
    _publish(channel, plain, 9)
    _publish(channel, argued, 9)
    view = _queue(server, plain)
    with client(server) as http:
        for p in (f"{qname}-lo", f"{qname}-hi"):
            http.delete(f"/api/policies/%2F/{p}")
        http.delete(f"/api/operator-policies/%2F/{qname}")
    assert view["policy"] == f"{qname}-hi" and view["operator_policy"] == qname
    # the operator policy's lower max-length wins; its expires is merged in
    assert view["effective_policy_definition"] == {
        "max-length": 6,
        "message-ttl": 60000,
        "expires": 600000,
    }
    # max-length: the lower of queue argument and policy
    assert (_count(channel, plain), _count(channel, argued)) == (6, 3)
    channel.queue_delete(plain)
    channel.queue_delete(argued)


def test_ttl_and_dead_letter_policy(server: ServerProcess, channel: Any, qname: str) -> None:
    dlq, dlq2 = f"{qname}-dead", f"{qname}-dead2"
    _put(
        server,
        f"/api/policies/%2F/{qname}",
        {
            "pattern": f"^{qname}-work",
            "definition": {
                "message-ttl": 50,
                "dead-letter-exchange": "",
                "dead-letter-routing-key": dlq,
            },
        },
    )
    for n in (dlq, dlq2):
        channel.queue_declare(n)
    work = f"{qname}-work"
    argued = f"{qname}-work-arg"  # its own routing key wins over the policy's
    channel.queue_declare(work)
    channel.queue_declare(argued, arguments={"x-dead-letter-routing-key": dlq2})
    channel.basic_publish("", work, b"late")
    channel.basic_publish("", argued, b"late too")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (_count(channel, dlq) < 1 or _count(channel, dlq2) < 1):
        time.sleep(0.05)
    _, props, body = channel.basic_get(dlq, auto_ack=True)
    _, _, body2 = channel.basic_get(dlq2, auto_ack=True)
    with client(server) as http:
        http.delete(f"/api/policies/%2F/{qname}")
    for n in (dlq, dlq2, work, argued):
        channel.queue_delete(n)
    assert (body, body2) == (b"late", b"late too")
    death = props.headers["x-death"][0]
    assert death["reason"] == "expired" and death["queue"] == work


def test_overflow_policy_and_argument(server: ServerProcess, channel: Any, qname: str) -> None:
    _put(
        server,
        f"/api/policies/%2F/{qname}",
        {"pattern": qname, "definition": {"max-length": 1, "overflow": "reject-publish"}},
    )
    rejecting, dropping = f"{qname}-r", f"{qname}-d"
    channel.queue_declare(rejecting)
    channel.queue_declare(dropping, arguments={"x-overflow": "drop-head"})  # argument wins
    channel.basic_publish("", rejecting, b"first")
    with pytest.raises(pika.exceptions.NackError):
        channel.basic_publish("", rejecting, b"second")
    channel.basic_publish("", dropping, b"first")
    channel.basic_publish("", dropping, b"second")  # confirmed: the head goes
    _, _, kept = channel.basic_get(rejecting, auto_ack=True)
    _, _, newest = channel.basic_get(dropping, auto_ack=True)
    with client(server) as http:
        http.delete(f"/api/policies/%2F/{qname}")
    channel.queue_delete(rejecting)
    channel.queue_delete(dropping)
    assert (kept, newest) == (b"first", b"second")


def test_expires_policy_deletes_unused_queue(
    server: ServerProcess, channel: Any, qname: str
) -> None:
    _put(server, f"/api/policies/%2F/{qname}", {"pattern": qname, "definition": {"expires": 200}})
    channel.queue_declare(qname)
    deadline = time.monotonic() + 10
    status = 200
    while time.monotonic() < deadline and status == 200:
        time.sleep(0.2)
        with client(server) as http:
            status = http.get(f"/api/queues/%2F/{qname}").status_code
    with client(server) as http:
        http.delete(f"/api/policies/%2F/{qname}")
    assert status == 404


def test_delivery_limit_policy_on_quorum_queues(
    server: ServerProcess, channel: Any, qname: str
) -> None:
    _put(
        server,
        f"/api/policies/%2F/{qname}",
        {"pattern": qname, "definition": {"delivery-limit": 1}, "apply-to": "quorum_queues"},
    )
    quorum, classic = f"{qname}-qq", f"{qname}-cq"  # the classic queue is not covered
    channel.queue_declare(quorum, durable=True, arguments={"x-queue-type": "quorum"})
    channel.queue_declare(classic)
    for n in (quorum, classic):
        channel.basic_publish("", n, b"poison")
    for _ in range(3):
        for n in (quorum, classic):
            method, _, _ = channel.basic_get(n)
            if method is not None:
                channel.basic_nack(method.delivery_tag, requeue=True)
    counts = (_count(channel, quorum), _count(channel, classic))
    view = _queue(server, quorum)
    with client(server) as http:
        http.delete(f"/api/policies/%2F/{qname}")
    channel.queue_delete(quorum)
    channel.queue_delete(classic)
    assert view["policy"] == qname and _queue(server, classic).get("policy") is None
    assert counts == (0, 1)


def test_alternate_exchange_policy(server: ServerProcess, channel: Any, qname: str) -> None:
    x, ae, own_ae = f"{qname}-x", f"{qname}-ae", f"{qname}-own"
    _put(
        server,
        f"/api/policies/%2F/{qname}",
        {
            "pattern": f"^{qname}-x",
            "definition": {"alternate-exchange": ae},
            "apply-to": "exchanges",
        },
    )
    channel.exchange_declare(x, "direct")
    channel.exchange_declare(f"{x}2", "direct", arguments={"alternate-exchange": own_ae})
    for name, queue in ((ae, f"{qname}-caught"), (own_ae, f"{qname}-own-caught")):
        channel.exchange_declare(name, "fanout")
        channel.queue_declare(queue)
        channel.queue_bind(queue, name)
    channel.basic_publish(x, "nobody", b"unroutable")
    channel.basic_publish(f"{x}2", "nobody", b"argument wins")
    caught = (_count(channel, f"{qname}-caught"), _count(channel, f"{qname}-own-caught"))
    with client(server) as http:
        shown = http.get(f"/api/exchanges/%2F/{q(x)}").json()
        unshown = http.get(f"/api/exchanges/%2F/{q(ae)}").json()
        http.delete(f"/api/policies/%2F/{qname}")
    channel.basic_publish(x, "nobody", b"no policy: dropped")
    after = _count(channel, f"{qname}-caught")
    for name in (x, f"{x}2", ae, own_ae):
        channel.exchange_delete(name)
    for queue in (f"{qname}-caught", f"{qname}-own-caught"):
        channel.queue_delete(queue)
    assert caught == (1, 1)
    assert shown["policy"] == qname and "policy" not in unshown
    assert after == 1


def _stream_facts(server: ServerProcess, name: str) -> dict[str, Any]:
    with client(server) as http:
        got: dict[str, Any] = http.get(f"/api/streams/%2F/{q(name)}").json()
        return got


def test_stream_retention_and_segment_policies(
    server: ServerProcess, channel: Any, qname: str
) -> None:
    limited, free = f"{qname}-s", f"other-{qname}"
    _put(
        server,
        f"/api/policies/%2F/{qname}",
        {
            "pattern": f"^{qname}-s",
            "definition": {"stream-max-segment-size-bytes": 8000, "max-length-bytes": 30000},
            "apply-to": "streams",
        },
    )
    for n in (limited, free):
        channel.queue_declare(n, durable=True, arguments={"x-queue-type": "stream"})
        for i in range(40):  # 40 confirmed publishes of 1 KB: one chunk each
            channel.basic_publish("", n, b"x" * 1000 + str(i).encode())
    facts, other = _stream_facts(server, limited), _stream_facts(server, free)
    view = _queue(server, limited)
    with client(server) as http:
        http.delete(f"/api/policies/%2F/{qname}")
    channel.queue_delete(limited)
    channel.queue_delete(free)
    assert view["policy"] == qname and view["arguments"] == {"x-queue-type": "stream"}
    assert other["segments"] == 1 and other["first_offset"] == 0
    assert facts["segments"] > 1  # segments rolled at the policy's size...
    assert facts["first_offset"] > 0  # ...and retention removed the oldest
    assert facts["bytes"] <= 30000 + 8000 + 2000


def test_stream_max_age_policy_set_on_an_existing_stream(
    server: ServerProcess, channel: Any, qname: str
) -> None:
    channel.queue_declare(
        qname,
        durable=True,
        arguments={"x-queue-type": "stream", "x-stream-max-segment-size-bytes": 4000},
    )
    for i in range(10):
        channel.basic_publish("", qname, b"old" * 400 + str(i).encode())
    before = _stream_facts(server, qname)
    _put(server, f"/api/policies/%2F/{qname}", {"pattern": qname, "definition": {"max-age": "1s"}})
    time.sleep(2.1)
    for i in range(10):  # the next segment rolls apply the retention
        channel.basic_publish("", qname, b"new" * 400 + str(i).encode())
    after = _stream_facts(server, qname)
    with client(server) as http:
        http.delete(f"/api/policies/%2F/{qname}")
    channel.queue_delete(qname)
    assert before["first_offset"] == 0
    # retention removes whole segments: all but the one that also holds new messages
    assert after["first_offset"] >= 10 - 3


def test_stream_filter_size_policy_keeps_filtering_right(
    server: ServerProcess, channel: Any, qname: str
) -> None:
    channel.queue_declare(qname, durable=True, arguments={"x-queue-type": "stream"})

    def publish(tag: str) -> None:
        for color in ("red", "blue"):
            channel.basic_publish(
                "",
                qname,
                f"{tag}-{color}".encode(),
                pika.BasicProperties(headers={"x-stream-filter-value": color}),
            )

    publish("before")
    _put(
        server,
        f"/api/policies/%2F/{qname}",
        {"pattern": qname, "definition": {"stream-filter-size-bytes": 64}},
    )
    publish("after")
    facts = _stream_facts(server, qname)
    channel.basic_qos(prefetch_count=10)
    got: list[bytes] = []
    tag = channel.basic_consume(
        qname,
        lambda ch, method, props, body: got.append(body),
        arguments={"x-stream-offset": "first", "x-stream-filter": "red"},
    )
    deadline = time.monotonic() + 10
    while len(got) < 2 and time.monotonic() < deadline:
        channel.connection.process_data_events(time_limit=0.1)
    channel.basic_cancel(tag)
    with client(server) as http:
        http.delete(f"/api/policies/%2F/{qname}")
    channel.queue_delete(qname)
    assert facts["filter_size_bytes"] == 64
    assert got == [b"before-red", b"after-red"]


# ------------------------------------------------------------------------------ durability


def test_policies_persist_export_and_import(fresh_server: ServerProcess) -> None:
    server = fresh_server
    with client(server) as http:
        http.put("/api/policies/%2F/cap", json={"pattern": "^cap", "definition": {"max-length": 1}})
        http.put(
            "/api/operator-policies/%2F/op",
            json={"pattern": ".*", "definition": {"message-ttl": 90000}, "apply-to": "queues"},
        )
        http.put("/api/global-parameters/cluster_name", json={"value": "sieve"})
    server.stop()
    server.start()
    conn = pika.BlockingConnection(pika.ConnectionParameters(server.host, server.amqp_port))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("cap.q", durable=True)
    _publish(ch, "cap.q", 3)
    count = _count(ch, "cap.q")
    conn.close()
    with client(server) as http:
        exported = http.get("/api/definitions").json()
        view = http.get("/api/queues/%2F/cap.q").json()
    assert count == 1
    assert view["effective_policy_definition"] == {"max-length": 1, "message-ttl": 90000}
    assert exported["policies"] == [
        {
            "vhost": "/",
            "name": "cap",
            "pattern": "^cap",
            "apply-to": "all",
            "definition": {"max-length": 1},
            "priority": 0,
        }
    ]
    assert exported["parameters"] == [
        {
            "value": {
                "pattern": ".*",
                "definition": {"message-ttl": 90000},
                "priority": 0,
                "apply-to": "queues",
            },
            "vhost": "/",
            "component": "operator_policy",
            "name": "op",
        }
    ]
    assert {"name": "cluster_name", "value": "sieve"} in exported["global_parameters"]


def test_stream_policy_reaches_a_stream_restored_closed_at_start(
    fresh_server: ServerProcess,
) -> None:
    """A restart opens streams on first use; the policy must still shape a stream that was
    idle at start and is first opened by a publish afterwards."""
    server = fresh_server
    conn = pika.BlockingConnection(pika.ConnectionParameters(server.host, server.amqp_port))
    conn.channel().queue_declare("seg.s", durable=True, arguments={"x-queue-type": "stream"})
    conn.close()
    _put(
        server,
        "/api/policies/%2F/seg",
        {"pattern": "^seg", "definition": {"stream-max-segment-size-bytes": 8000}},
    )
    server.stop()
    server.start()
    conn = pika.BlockingConnection(pika.ConnectionParameters(server.host, server.amqp_port))
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(30):  # 30 confirmed publishes of 1 KB: one chunk each
        ch.basic_publish("", "seg.s", b"x" * 1000 + str(i).encode())
    conn.close()
    facts = _stream_facts(server, "seg.s")
    assert facts["messages"] == 30
    assert facts["segments"] > 1  # rolled at the policy's size, not the 500 MB default


RABBIT_FILE_POLICIES = {
    "policies": [
        {
            "vhost": "/",
            "name": "p1",
            "pattern": "^q",
            "apply-to": "queues",
            "definition": {"max-length": 10},
            "priority": 1,
        },
        {
            "vhost": "/",
            "name": "ps",
            "pattern": "^s",
            "apply-to": "all",
            "definition": {"max-age": "1D", "max-length-bytes": 100000},
            "priority": 3,
        },
    ],
    "parameters": [
        {
            "value": {
                "pattern": "^q",
                "definition": {"max-length": 5, "message-ttl": 500},
                "priority": 0,
                "apply-to": "queues",
            },
            "vhost": "/",
            "component": "operator_policy",
            "name": "o1",
        }
    ],
    "global_parameters": [
        {"name": "internal_cluster_id", "value": "rabbitmq-cluster-id-ySW9PCq2jrQphnrA956hQA"}
    ],
    "queues": [
        {"name": "qa", "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}}
    ],
}  # the sections of a file a RabbitMQ 3.10.8 exported with these objects


def test_import_of_rabbitmq_policies(fresh_server: ServerProcess) -> None:
    server = fresh_server
    with client(server) as http:
        imported = http.post("/api/definitions", json=RABBIT_FILE_POLICIES)
        view = http.get("/api/queues/%2F/qa").json()
        exported = http.get("/api/definitions").json()
        bad = json.loads(json.dumps(RABBIT_FILE_POLICIES))
        bad["policies"][0]["definition"] = {"max-length": "x"}
        bad["policies"][0]["name"] = "p9"
        refused = http.post("/api/definitions", json=bad)
        after = [p["name"] for p in http.get("/api/policies").json()]
    assert imported.status_code == 204
    assert (view["policy"], view["operator_policy"]) == ("p1", "o1")
    assert view["effective_policy_definition"] == {"max-length": 5, "message-ttl": 500}
    for key in ("policies", "parameters", "global_parameters"):
        assert exported[key] == RABBIT_FILE_POLICIES[key]
    assert refused.status_code == 400
    assert refused.json()["reason"] == (
        "policy 'p9' in vhost '/': Validation failed\n\n<<\"x\">> is not a valid maximum length\n"
    )
    assert after == ["p1", "ps"]  # nothing of the refused file applied

"""pyrabbit2 (a RabbitMQ management API client from PyPI) against SieveMQ, unchanged."""

from __future__ import annotations

import warnings

import pytest

from sievemq.testing import ServerProcess

with warnings.catch_warnings():  # pyrabbit2 1.0.7's docstrings hold invalid escapes
    warnings.simplefilter("ignore", DeprecationWarning)
    from pyrabbit2.api import Client
    from pyrabbit2.http import HTTPError


@pytest.fixture
def rabbit(server: ServerProcess) -> Client:
    return Client(f"127.0.0.1:{server.admin_port}", "guest", "guest", timeout=30)


def test_pyrabbit2_topology_publish_and_users(rabbit: Client, qname: str) -> None:
    assert rabbit.is_alive()
    assert rabbit.get_whoami()["name"] == "guest"
    assert "/" in rabbit.get_vhost_names()
    rabbit.create_queue("/", qname, durable=True, arguments={"x-queue-type": "stream"})
    assert rabbit.get_queue("/", qname)["type"] == "stream"
    assert qname in [q["name"] for q in rabbit.get_queues("/", pattern=qname)]
    rabbit.create_exchange("/", f"{qname}-x", "topic")
    rabbit.create_binding("/", f"{qname}-x", qname, "a.#")
    assert rabbit.publish("/", f"{qname}-x", "a.b", "hello") is True
    assert rabbit.get_queue_depth("/", qname) == 1
    with pytest.raises(HTTPError) as info:  # basic.get on a stream, as RabbitMQ answers it
        rabbit.get_messages("/", qname)
    assert info.value.status == 400
    assert any(
        b["source"] == f"{qname}-x" and b["destination"] == qname for b in rabbit.get_bindings()
    )
    rabbit.create_user(f"{qname}-u", "pw", tags="monitoring")
    rabbit.set_vhost_permissions("/", f"{qname}-u", ".*", ".*", "")
    assert f"{qname}-u" in [u["name"] for u in rabbit.get_users()]
    defs = rabbit.get_definitions()
    assert qname in [q["name"] for q in defs["queues"]]
    assert rabbit.get_overview()["object_totals"]["queues"] >= 1
    rabbit.delete_queue("/", qname)
    with pytest.raises(HTTPError) as info:
        rabbit.get_queue("/", qname)
    assert info.value.status == 404

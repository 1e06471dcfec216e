"""A stream replica logs in to its leader with the cluster secret, not as a user.

Two real nodes and a real etcd. The users are the cluster's (through etcd): once ``guest``,
every node's default user, is deleted, a replica still follows its leader, because it logs in
on the leader's Stream-protocol port as ``cluster-link:NODE`` with the cluster secret (as the
inter-node link does). That login with any other password is refused.
"""

from __future__ import annotations

import asyncio

import httpx
import pika
import pytest

from sievemq.spark.stream_client import StreamClient, StreamProtocolError, StreamURI
from sievemq.testing import ServerProcess

from .cluster_helpers import OPEN, until
from .test_replication import identical

ADMIN = ("admin", "not-guest")


def _admin(node: ServerProcess, method: str, path: str, auth: tuple[str, str], **kw: object) -> int:
    response = httpx.request(method, node.admin_url + path, auth=auth, timeout=10, **kw)  # type: ignore[arg-type]
    return response.status_code


def _url(node: ServerProcess) -> str:
    return f"amqp://{ADMIN[0]}:{ADMIN[1]}@{node.host}:{node.amqp_port}/%2F"


def _guest_gone(node: ServerProcess) -> bool:
    return _admin(node, "GET", "/api/users/guest", ADMIN) == 404


def test_replica_follows_with_the_default_user_deleted(nodes: dict[str, ServerProcess]) -> None:
    a, b = nodes["a"], nodes["b"]
    guest = ("guest", "guest")
    user = {"password": ADMIN[1], "tags": "administrator"}
    assert _admin(a, "PUT", f"/api/users/{ADMIN[0]}", guest, json=user) in (201, 204)
    every = {"configure": ".*", "write": ".*", "read": ".*"}
    assert _admin(a, "PUT", f"/api/permissions/%2F/{ADMIN[0]}", guest, json=every) in (201, 204)
    until(lambda: _admin(b, "GET", "/api/whoami", ADMIN) == 200, "b knows the new user")
    assert _admin(b, "DELETE", "/api/users/guest", ADMIN) == 204
    until(lambda: _guest_gone(a) and _guest_gone(b), "guest deleted on both nodes")

    conn = pika.BlockingConnection(pika.URLParameters(_url(a)))
    OPEN.append(conn)
    arguments = {"x-queue-type": "stream", "x-initial-cluster-size": 2}
    conn.channel().queue_declare("secret-login", durable=True, arguments=arguments)

    async def send() -> None:
        import aiormq

        connection = await aiormq.connect(_url(a))
        try:
            ch = await connection.channel(publisher_confirms=True)
            for i in range(100):
                await ch.basic_publish(f"m{i}".encode(), routing_key="secret-login")
        finally:
            await connection.close()

    asyncio.run(send())
    until(lambda: identical(a, b, "secret-login"), "b's copy = a's files, guest deleted")
    # the replica's connection is the cluster's own, as the link: not one of a's clients
    listed = httpx.get(a.admin_url + "/api/connections", auth=ADMIN, timeout=10).json()
    assert [c for c in listed if c["user"].startswith("cluster-link:")] == []


def test_cluster_login_with_a_wrong_secret_is_refused(nodes: dict[str, ServerProcess]) -> None:
    a = nodes["a"]
    uri = StreamURI.parse(f"rabbitmq-stream://cluster-link%3Ab:guess@{a.host}:{a.stream_port}/%2F")
    with pytest.raises(StreamProtocolError, match="authentication"):
        StreamClient(uri)

"""The stream protocol uses the AMQP side's vhosts and users: a stream created over the stream
protocol in a vhost is that vhost's stream queue for AMQP 0-9-1 and the admin API, the same name
in another vhost is another stream, and a user without access to a vhost cannot open it."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pika
import pytest
from rstream import ConsumerOffsetSpecification, MessageContext, OffsetType, Producer
from rstream.consumer import Consumer

from sievemq.testing import ServerProcess
from sievemq.testing.stream_client import RawStreamClient
from sievemq.testing.wait import eventually

pytestmark = pytest.mark.timeout(120)

VHOST, USER, PASSWORD = "stream-vh", "vh-user", "vh-pw"
VHOST_ACCESS_FAILURE = 12


@pytest.fixture(scope="module")
def vhost_user(server: ServerProcess) -> Iterator[str]:
    """vh-user: every permission on VHOST, none on '/'."""
    with httpx.Client(base_url=server.admin_url, auth=("guest", "guest"), timeout=10) as http:
        assert http.put(f"/api/vhosts/{VHOST}").is_success
        assert http.put(f"/api/users/{USER}", json={"password": PASSWORD, "tags": ""}).is_success
        perm = {"configure": ".*", "write": ".*", "read": ".*"}
        assert http.put(f"/api/permissions/{VHOST}/{USER}", json=perm).is_success
    yield USER


def _amqp_bodies(server: ServerProcess, vhost: str, queue: str, n: int) -> list[bytes]:
    url = f"amqp://{USER}:{PASSWORD}@{server.host}:{server.amqp_port}/{quote(vhost, safe='')}"
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=100)
        bodies: list[bytes] = []
        for _method, _props, body in ch.consume(
            queue, arguments={"x-stream-offset": "first"}, inactivity_timeout=10
        ):
            assert body is not None, f"only {len(bodies)} of {n} arrived over AMQP"
            bodies.append(body)
            if len(bodies) == n:
                break
        return bodies
    finally:
        conn.close()


async def test_a_stream_lives_in_its_vhost_for_both_protocols(
    server: ServerProcess, vhost_user: str, qname: str
) -> None:
    async with Producer(
        server.host, server.stream_port, username=USER, password=PASSWORD, vhost=VHOST
    ) as p:
        await p.create_stream(qname)
        await p.send_wait(qname, b"in-vhost")
    async with Producer(server.host, server.stream_port, username="guest", password="guest") as p:
        assert await p.stream_exists(qname) is False  # not in '/'
        await p.create_stream(qname)  # the same name in '/' is another stream
        await p.send_wait(qname, b"in-default")

    with httpx.Client(base_url=server.admin_url, auth=("guest", "guest"), timeout=10) as http:
        queue = http.get(f"/api/queues/{VHOST}/{qname}").json()
    assert queue["vhost"] == VHOST and queue["arguments"]["x-queue-type"] == "stream"

    # AMQP 0-9-1 in the vhost reads the stream-protocol publish, as the same user
    assert _amqp_bodies(server, VHOST, qname, 1) == [b"in-vhost"]

    got: list[bytes] = []

    async def on_message(msg: bytes, ctx: MessageContext) -> None:
        got.append(bytes(msg))

    async with Consumer(
        server.host, server.stream_port, username=USER, password=PASSWORD, vhost=VHOST
    ) as c:
        await c.subscribe(
            qname,
            on_message,
            offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
        )
        await eventually(lambda: len(got) >= 1)
    assert got == [b"in-vhost"]


def test_a_user_cannot_open_a_vhost_it_has_no_access_to(
    server: ServerProcess, vhost_user: str
) -> None:
    raw = RawStreamClient(server)
    try:
        assert raw.open(user=USER, password=PASSWORD, vhost="/") == VHOST_ACCESS_FAILURE
    finally:
        raw.close()
    raw = RawStreamClient(server)
    try:
        assert raw.open(user=USER, password=PASSWORD, vhost=VHOST) == 1
    finally:
        raw.close()

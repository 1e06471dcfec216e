"""MetadataUpdate (code 6, stream not available) reaches every stream-protocol connection with a
publisher or a subscription on a stream, whichever way the stream is deleted: over the stream
protocol (test_stream_protocol.py), AMQP 0-9-1 queue.delete, or the admin API."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest
from rstream import schema
from rstream.client import Client
from rstream.constants import OffsetType

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect
from sievemq.testing.stream_client import open_client
from sievemq.testing.wait import eventually

STREAM_NOT_AVAILABLE = 6


def _delete_over_amqp(server: ServerProcess, stream: str) -> None:
    conn = connect(server)
    try:
        conn.channel().queue_delete(stream)
    finally:
        conn.close()


def _delete_over_admin_api(server: ServerProcess, stream: str) -> None:
    r = httpx.delete(
        f"{server.admin_url}/api/queues/%2F/{stream}", auth=("guest", "guest"), timeout=30
    )
    assert r.status_code == 204, r.text


def _listen(client: Client, into: list[tuple[int, str]]) -> None:
    def on_update(frame: schema.MetadataUpdate) -> None:
        into.append((frame.metadata_info.code, frame.metadata_info.stream))

    client.add_handler(schema.MetadataUpdate, on_update)


@pytest.mark.parametrize(
    "delete", [_delete_over_amqp, _delete_over_admin_api], ids=["amqp091", "admin_api"]
)
async def test_deleting_a_stream_elsewhere_tells_its_publishers_and_consumers(
    server: ServerProcess, qname: str, delete: Callable[[ServerProcess, str], None]
) -> None:
    subscriber, publisher, bystander = [await open_client(server) for _ in range(3)]
    other = f"{qname}-other"
    try:
        await subscriber.create_stream(qname)
        await subscriber.create_stream(other)
        seen: dict[str, list[tuple[int, str]]] = {"sub": [], "pub": [], "other": []}
        _listen(subscriber, seen["sub"])
        _listen(publisher, seen["pub"])
        _listen(bystander, seen["other"])
        await subscriber.subscribe(
            qname,
            subscription_id=1,
            offset_spec=schema.OffsetSpec.from_params(OffsetType.FIRST, None),
        )
        await publisher.declare_publisher(qname, "", 1)
        # a connection busy with another stream only
        await bystander.declare_publisher(other, "", 1)

        await asyncio.to_thread(delete, server, qname)

        await eventually(lambda: bool(seen["sub"]) and bool(seen["pub"]))
        assert seen["sub"] == [(STREAM_NOT_AVAILABLE, qname)]
        assert seen["pub"] == [(STREAM_NOT_AVAILABLE, qname)]
        await asyncio.sleep(0.2)
        assert seen["other"] == []
        assert await subscriber.stream_exists(qname) is False
        assert await bystander.stream_exists(other) is True
    finally:
        for c in (subscriber, publisher, bystander):
            await c.close()

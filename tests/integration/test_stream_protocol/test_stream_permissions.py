"""RabbitMQ's permissions on the stream protocol (rstream against a real server).

As RabbitMQ's stream plugin (``rabbit_stream_utils:check_*_permitted``): Create and Delete
need *configure* on the stream, DeclarePublisher and Publish *write*, Subscribe, QueryOffset,
StoreOffset and QueryPublisherSequence *read*. A refusal is response code 16 (access
refused), which rstream raises as ``AccessRefused``; StoreOffset has no reply, so a refused
one is checked by reading the offset back as an allowed user.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
from rstream import (
    AMQPMessage,
    ConfirmationStatus,
    Consumer,
    MessageContext,
    OffsetType,
    Producer,
)
from rstream.client import Client
from rstream.exceptions import AccessRefused, OffsetNotFound, ServerError

from sievemq.testing import ServerProcess
from sievemq.testing.stream_client import consumer, open_client, producer
from sievemq.testing.wait import eventually

pytestmark = pytest.mark.timeout(120)

USER, PASSWORD = "alice", "alice-pw"


@pytest.fixture(scope="module")
def alice(server: ServerProcess) -> Iterator[str]:
    """alice: configure ^alice-, write ^alice-|^shared$, read ^alice-|^shared-r$."""
    with httpx.Client(base_url=server.admin_url, auth=("guest", "guest"), timeout=10) as http:
        assert http.put(f"/api/users/{USER}", json={"password": PASSWORD, "tags": ""}).is_success
        perm = {"configure": "^alice-", "write": "^alice-|^shared$", "read": "^alice-|^shared-r$"}
        assert http.put(f"/api/permissions/%2F/{USER}", json=perm).is_success
    yield USER


def as_alice_producer(server: ServerProcess) -> Producer:
    return Producer(server.host, server.stream_port, username=USER, password=PASSWORD)


def as_alice_consumer(server: ServerProcess) -> Consumer:
    return Consumer(server.host, server.stream_port, username=USER, password=PASSWORD)


async def _streams(server: ServerProcess, *names: str) -> None:
    async with producer(server) as p:
        for name in names:
            await p.create_stream(name, exists_ok=True)


async def test_create_and_delete_need_configure(server: ServerProcess, alice: str) -> None:
    await _streams(server, "shared")
    async with as_alice_producer(server) as p:
        with pytest.raises(AccessRefused):
            await p.create_stream("bob-stream")
        await p.create_stream("alice-own")
        with pytest.raises(AccessRefused):
            await p.delete_stream("shared")
        await p.delete_stream("alice-own")
    async with producer(server) as p:
        assert not await p.stream_exists("bob-stream")
        assert await p.stream_exists("shared")  # the refused delete changed nothing


async def test_publish_needs_write(server: ServerProcess, alice: str) -> None:
    await _streams(server, "shared", "shared-r")
    async with as_alice_producer(server) as p:
        with pytest.raises(ServerError) as refused:
            await p.send_wait("shared-r", AMQPMessage(body=b"refused"))
        assert _caused_by_access_refused(refused.value)
        await p.send_wait("shared", AMQPMessage(body=b"allowed"))
    got: list[bytes] = []

    async def on_message(msg: bytes, ctx: MessageContext) -> None:
        got.append(bytes(msg))  # the AMQP 1.0 encoded message: the body is inside

    async with consumer(server) as c:
        await c.subscribe("shared-r", on_message, offset_specification=_first())
        await c.subscribe("shared", on_message, offset_specification=_first())
        await eventually(lambda: any(b"allowed" in m for m in got))
        await asyncio.sleep(0.5)  # both streams read to their end meanwhile
    assert got and not any(b"refused" in m for m in got)
    assert any(b"allowed" in m for m in got)


async def test_subscribe_and_offsets_need_read(server: ServerProcess, alice: str) -> None:
    await _streams(server, "shared", "shared-r")

    async def on_message(msg: bytes, ctx: MessageContext) -> None:
        pass

    async with as_alice_consumer(server) as c:
        with pytest.raises(AccessRefused):
            await c.subscribe("shared", on_message)
        await c.subscribe("shared-r", on_message)
        with pytest.raises(AccessRefused):
            await c.query_offset("shared", "alice-tracker")
        with pytest.raises(OffsetNotFound):
            await c.query_offset("shared-r", "alice-tracker")
        await c.store_offset("shared", "alice-tracker", 7)  # refused: no reply, no effect
        await c.store_offset("shared-r", "alice-tracker", 3)
        await asyncio.sleep(0.2)
        assert await c.query_offset("shared-r", "alice-tracker") == 3
    async with consumer(server) as c:
        with pytest.raises(OffsetNotFound):
            await c.query_offset("shared", "alice-tracker")


async def test_publish_refused_once_write_is_revoked(server: ServerProcess, alice: str) -> None:
    """Publish re-checks write, as RabbitMQ does: a producer declared while it could write
    gets access refused for frames sent after the permission is taken away."""
    await _streams(server, "alice-revoked")
    async with as_alice_producer(server) as p:
        await p.send_wait("alice-revoked", AMQPMessage(body=b"before"))
        with httpx.Client(base_url=server.admin_url, auth=("guest", "guest")) as http:
            perm = {"configure": "^alice-", "write": "^shared$", "read": "^alice-|^shared-r$"}
            assert http.put(f"/api/permissions/%2F/{USER}", json=perm).is_success
        statuses: list[ConfirmationStatus] = []
        try:
            # rstream's send_wait never completes on a publish error (its future is only
            # settled for confirms), so the error is read through a confirmation callback
            await p.send(
                "alice-revoked", AMQPMessage(body=b"after"), on_publish_confirm=statuses.append
            )
            await eventually(lambda: bool(statuses))
            assert not statuses[0].is_confirmed
            assert statuses[0].response_code == 16  # access refused
            with httpx.Client(base_url=server.admin_url, auth=("guest", "guest")) as http:
                pubs = http.get("/api/stream/publishers/%2F/alice-revoked").json()
            # the refused one counts as errored on the publisher, as RabbitMQ's does
            assert [(x["published"], x["confirmed"], x["errored"]) for x in pubs] == [(1, 1, 1)]
        finally:
            with httpx.Client(base_url=server.admin_url, auth=("guest", "guest")) as http:
                perm["write"] = "^alice-|^shared$"
                http.put(f"/api/permissions/%2F/{USER}", json=perm)


def _caused_by_access_refused(error: BaseException | None) -> bool:
    """rstream answers a refused DeclarePublisher by deleting the publisher it meant to
    declare, which the server does not know (18), so the AccessRefused (16) is the cause
    of what it raises (it does the same against RabbitMQ)."""
    while error is not None:
        if isinstance(error, AccessRefused):
            return True
        error = error.__context__
    return False


def _first() -> object:
    from rstream import ConsumerOffsetSpecification

    return ConsumerOffsetSpecification(OffsetType.FIRST, None)


async def test_super_stream_management_needs_configure(server: ServerProcess, alice: str) -> None:
    """Create/DeleteSuperStream need configure on the super stream (its exchange) and on
    every partition stream."""
    client = Client(server.host, server.stream_port, frame_max=1024 * 1024, heartbeat=60)
    await client.start()
    await client.authenticate(vhost="/", username=USER, password=PASSWORD)
    try:
        with pytest.raises(AccessRefused):  # a partition outside ^alice-
            await client.create_super_stream("alice-orders", ["alice-o-0", "bob-o-1"], ["a", "b"])
        with pytest.raises(AccessRefused):  # the super stream's own name outside ^alice-
            await client.create_super_stream("orders-of-bob", ["alice-o-2"], ["a"])
        await client.create_super_stream("alice-orders", ["alice-o-0", "alice-o-1"], ["a", "b"])
        assert await client.partitions("alice-orders") == ["alice-o-0", "alice-o-1"]
    finally:
        await client.close()
    guest = await open_client(server)
    try:
        assert not await guest.stream_exists("bob-o-1")  # the refused create made nothing
        await guest.create_super_stream("shared-orders", ["shared-o-0"], ["a"])
    finally:
        await guest.close()
    client = Client(server.host, server.stream_port, frame_max=1024 * 1024, heartbeat=60)
    await client.start()
    await client.authenticate(vhost="/", username=USER, password=PASSWORD)
    try:
        with pytest.raises(AccessRefused):
            await client.delete_super_stream("shared-orders")
        await client.delete_super_stream("alice-orders")
        assert not await client.stream_exists("alice-o-0")
    finally:
        await client.close()

"""Stream-protocol connections in the admin API and in the server's connection limits and
resource alarms, against a real server process with real rstream clients."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from pathlib import Path
from typing import Any

import httpx
from rstream import RawMessage

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect
from sievemq.testing.stream_client import RawStreamClient, consumer, open_client, producer
from sievemq.testing.wait import eventually


def _admin(server: ServerProcess) -> httpx.Client:
    return httpx.Client(base_url=server.admin_url, auth=("guest", "guest"), timeout=10)


def _named(connections: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [c for c in connections if c["client_properties"].get("connection_name") == name]


async def test_stream_connections_are_listed_and_can_be_closed(server: ServerProcess) -> None:
    admin = _admin(server)
    amqp = connect(server)
    try:
        await _list_and_close(server, admin)
    finally:
        amqp.close()
        admin.close()


async def _list_and_close(server: ServerProcess, admin: httpx.Client) -> None:
    closed: list[str] = []

    async def on_closed(info: Any) -> None:
        closed.append(info.reason)

    async with consumer(server, connection_name="billing-reader", on_close_handler=on_closed) as c:
        await c.create_stream("adm-s", exists_ok=True)
        await c.subscribe("adm-s", lambda m, ctx: None)
        listed = _named(admin.get("/api/connections").json(), "billing-reader")
        assert listed, "the stream connection is not listed"
        view = listed[0]
        assert view["protocol"] == "stream"
        assert view["user"] == "guest" and view["vhost"] == "/"
        assert (
            view["name"] == f"{view['peer_host']}:{view['peer_port']} -> 127.0.0.1:{view['port']}"
        )
        assert view["port"] == server.stream_port and view["channels"] == 0
        protocols = {c["protocol"] for c in admin.get("/api/connections").json()}
        assert protocols == {"stream", "AMQP 0-9-1"}
        stream_only = admin.get("/api/stream/connections").json()
        assert stream_only and {c["protocol"] for c in stream_only} == {"stream"}
        one = admin.get(f"/api/connections/{view['name']}").json()
        assert one["client_properties"]["connection_name"] == "billing-reader"
        assert admin.get(f"/api/connections/{view['name']}/channels").json() == []

        assert admin.delete(f"/api/connections/{view['name']}").status_code == 204
        await eventually(lambda: bool(closed))
        await eventually(lambda: not _named(admin.get("/api/connections").json(), "billing-reader"))


def test_stream_connections_count_in_max_connections(tmp_path: Path) -> None:
    """One limit for both protocols: with --max-connections 2, an AMQP connection and a
    stream connection fill it and the next stream connection is closed before any frame."""
    srv = ServerProcess(tmp_path / "data", extra_args=("--max-connections", "2")).start()
    try:
        amqp = connect(srv)
        first = RawStreamClient(srv)
        assert first.open() == 1
        refused = socket.create_connection((srv.host, srv.stream_port), timeout=5)
        refused.settimeout(5)
        with contextlib.suppress(ConnectionResetError):  # reset or closed: no slot
            assert refused.recv(1) == b""
        refused.close()
        first.sock.close()
        # the slot comes back once the stream connection goes (however long the server
        # takes to see it go: tried until a deadline, not a number of times)
        deadline = time.monotonic() + 15
        while True:
            again = RawStreamClient(srv)
            try:
                if again.open() == 1:
                    break
            except (EOFError, ConnectionResetError):
                pass
            finally:
                again.sock.close()
            assert time.monotonic() < deadline, "the freed slot was never reused"
            time.sleep(0.02)
        amqp.close()
    finally:
        assert srv.stop() == 0, srv.stderr()


async def test_a_resource_alarm_holds_stream_publishers(tmp_path: Path) -> None:
    """As RabbitMQ's stream reader: while an alarm is on, a connection with a publisher is
    not read (its Publish frames wait in TCP, unconfirmed, unstored); connections without
    publishers go on, and the admin API shows the publisher's connection blocked."""
    srv = ServerProcess(
        tmp_path / "data",
        extra_args=("--memory-high-watermark", "1000", "--alarm-interval-ms", "50"),
    ).start()
    try:
        confirmed: list[int] = []
        async with producer(srv, connection_name="held-publisher") as p:
            await p.create_stream("alarmed", exists_ok=True)
            await p.send_batch(
                "alarmed",
                [RawMessage(b"x") for _ in range(5)],
                on_publish_confirm=lambda status: confirmed.append(status.message_id),
            )
            await asyncio.sleep(1.0)
            assert confirmed == []
            client = await open_client(srv)  # no publisher: still served
            try:
                assert await client.stream_exists("alarmed")
            finally:
                await client.close()
            amqp = connect(srv)
            declared = amqp.channel().queue_declare("alarmed", passive=True)
            amqp.close()
            assert declared.method.message_count == 0  # nothing was stored
            with _admin(srv) as admin:
                views = _named(admin.get("/api/connections").json(), "held-publisher")
            assert views and any(v["state"] == "blocked" for v in views)
    finally:
        assert srv.stop() == 0, srv.stderr()

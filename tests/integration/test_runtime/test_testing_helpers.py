"""sievemq.testing, the helpers SieveMQ ships: they start what they say and check the stop."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import aiormq
import httpx
import pytest
from pamqp import commands

from sievemq.testing import (
    AsyncRawClient,
    GatewayShutdownError,
    RawClient,
    running_gateway,
    start_server_process,
)


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


async def test_running_gateway_serves_amqp_and_admin_and_frees_its_ports() -> None:
    async with running_gateway() as gw:
        assert gw.url == f"amqp://guest:guest@127.0.0.1:{gw.amqp_port}/"
        assert gw.data_dir.is_dir()
        conn = await aiormq.connect(gw.url)
        channel = await conn.channel()
        await channel.queue_declare("orders", durable=True, arguments={"x-queue-type": "stream"})
        await channel.confirm_delivery()
        await channel.basic_publish(b"one", routing_key="orders")
        await conn.close()
        assert gw.queue("orders").message_count == 1
        async with httpx.AsyncClient(base_url=gw.admin_url) as http:
            assert (await http.get("/readyz")).json() == {"status": "ready"}
        ports = (gw.amqp_port, gw.admin_port)
        data_dir = gw.data_dir
    assert all(_refused(port) for port in ports)
    assert not data_dir.exists()  # its own temporary directory is removed


async def test_a_client_still_connected_is_closed_with_320() -> None:
    async with running_gateway(grace_s=0.2) as gw:
        client = await AsyncRawClient.connect(gw.host, gw.amqp_port)
        await client.handshake()
    close = await client.next_method()
    assert isinstance(close, commands.Connection.Close)
    assert close.reply_code == 320
    await client.close()


async def test_an_error_on_the_event_loop_fails_the_stop() -> None:
    def broken() -> None:
        raise RuntimeError("a callback failed")

    with pytest.raises(GatewayShutdownError, match="a callback failed"):
        async with running_gateway():
            asyncio.get_running_loop().call_soon(broken)
            await asyncio.sleep(0.05)


def test_server_process_is_started_and_its_clean_exit_checked(tmp_path: Path) -> None:
    with start_server_process(tmp_path / "data", "--fsync", "always") as srv:
        assert srv.running and srv.pid != os.getpid()
        assert srv.url == f"amqp://guest:guest@127.0.0.1:{srv.amqp_port}/%2F"
        with RawClient(srv.host, srv.amqp_port) as client:
            tune = client.handshake()
            assert tune.frame_max > 0
    assert not srv.running
    assert srv.proc is not None and srv.proc.returncode == 0

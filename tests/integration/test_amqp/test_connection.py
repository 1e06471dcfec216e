"""Connection life: SIGTERM closes clients with 320, silent peers are dropped."""

from __future__ import annotations

import time

import pytest
from pamqp import commands

from sievemq.testing import ServerProcess
from sievemq.testing.raw import Closed, RawClient

pytestmark = pytest.mark.timeout(120)  # a hang guard, with room for a starved machine


def test_sigterm_closes_connections_with_320(fresh_server: ServerProcess) -> None:
    clients = []
    for _ in range(2):
        client = RawClient(fresh_server.host, fresh_server.amqp_port)
        client.handshake()
        client.open_channel()
        clients.append(client)
    assert fresh_server.stop() == 0
    for client in clients:
        close = client.expect(commands.Connection.Close)
        assert close.reply_code == 320
        assert close.reply_text.startswith("CONNECTION_FORCED - "), close.reply_text
        client.close()


def test_silent_peer_is_dropped_after_two_heartbeats(server: ServerProcess) -> None:
    client = RawClient(server.host, server.amqp_port)
    client.handshake(heartbeat=1)
    start = time.monotonic()
    heartbeats = 0
    with pytest.raises(Closed):
        while time.monotonic() - start < 10:
            _, value = client.read_frame(timeout=10)
            if value.name == "Heartbeat":
                heartbeats += 1
    elapsed = time.monotonic() - start
    assert heartbeats >= 1, "the server sends heartbeats too"
    assert 1.5 <= elapsed <= 4.5, f"dropped after {elapsed:.1f}s, expected about 2 intervals"
    client.close()


def test_peer_that_sends_heartbeats_stays(server: ServerProcess) -> None:
    client = RawClient(server.host, server.amqp_port)
    client.handshake(heartbeat=1)
    client.open_channel()
    for _ in range(6):
        time.sleep(0.5)
        client.send(b"\x08\x00\x00\x00\x00\x00\x00\xce")
    ok = client.rpc(commands.Exchange.Declare(exchange="amq.direct", passive=True))
    assert isinstance(ok, commands.Exchange.DeclareOk), ok
    client.close()

"""SIGTERM while a publisher's messages are being read: every stored message is confirmed.

On shutdown the server stops reading, flushes and fsyncs every stream, sends the
confirms, and only then closes the connections with 320. A message that is stored but was
never acked would be published twice by a client that retries what was not confirmed.
"""

from __future__ import annotations

import os
import signal
import struct
import time
from pathlib import Path

import pytest
from pamqp import body as pbody
from pamqp import commands, frame

from sievemq.testing import ServerProcess
from sievemq.testing.raw import FRAME_END, Closed, RawClient

pytestmark = pytest.mark.timeout(60)

COUNT = 3000


def one_publish(channel: int, body: bytes) -> bytes:
    method = frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), channel)
    payload = struct.pack(">HHQ", 60, 0, len(body)) + b"\x00\x00"
    head = struct.pack(">BHI", 2, channel, len(payload)) + payload + FRAME_END
    return method + head + frame.marshal(pbody.ContentBody(body), channel)


@pytest.mark.parametrize("fsync", ["batch", "always"])
def test_sigterm_confirms_every_stored_message(tmp_path: Path, fsync: str) -> None:
    server = ServerProcess(tmp_path / "data", ("--fsync", fsync)).start()
    try:
        client = RawClient(server.host, server.amqp_port)
        client.handshake()
        client.open_channel(1)
        declare = commands.Queue.Declare(
            queue="q", durable=True, arguments={"x-queue-type": "stream"}
        )
        assert isinstance(client.rpc(declare, 1), commands.Queue.DeclareOk)
        client.confirm_select(1)
        client.send(one_publish(1, b"x" * 1000) * COUNT)  # about 3 MB in one write
        time.sleep(0.005)
        assert server.proc is not None
        os.kill(server.proc.pid, signal.SIGTERM)
        acked = nacked = 0
        close_code = None
        try:
            while close_code is None:
                _, method = client.next_method(timeout=10)
                if isinstance(method, commands.Basic.Ack):
                    assert method.delivery_tag > acked, "acks arrive in order"
                    acked = method.delivery_tag
                elif isinstance(method, commands.Basic.Nack):
                    nacked += 1
                elif isinstance(method, commands.Connection.Close):
                    close_code = method.reply_code
        except (Closed, OSError):
            pass
        client.close()
        assert close_code == 320, "the client sees connection.close 320"
        assert server.proc.wait(15) == 0, server.stderr()
        assert nacked == 0, "nothing failed to be written"

        server.restart()
        reader = RawClient(server.host, server.amqp_port)
        reader.handshake()
        reader.open_channel(1)
        ok = reader.rpc(commands.Queue.Declare(queue="q", passive=True), 1)
        assert isinstance(ok, commands.Queue.DeclareOk)
        reader.close()
        # everything stored was acked before close 320, and only stored messages were acked
        assert ok.message_count == acked, (ok.message_count, acked)
        assert 0 < acked <= COUNT
    finally:
        if server.running:
            assert server.stop() == 0

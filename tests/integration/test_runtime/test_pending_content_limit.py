"""Per-connection limit on the body bytes of unfinished messages (max_pending_content_bytes)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pamqp import body as pbody
from pamqp import commands, frame, header

from sievemq.testing import ServerProcess
from sievemq.testing.raw import RawClient

LIMIT = 1_000_000


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path_factory.mktemp("capped") / "data",
        ("--max-pending-content-bytes", str(LIMIT)),
    ).start()
    yield proc
    assert proc.running, proc.stderr()
    assert proc.stop() == 0


def _client(srv: ServerProcess) -> RawClient:
    client = RawClient(srv.host, srv.amqp_port)
    client.handshake()
    return client


def _start_message(channel: int, size: int) -> bytes:
    return frame.marshal(
        commands.Basic.Publish(exchange="", routing_key="nowhere"), channel
    ) + frame.marshal(header.ContentHeader(0, size, commands.Basic.Properties()), channel)


def _body(channel: int, n: int, piece: int = 100_000) -> bytes:
    return b"".join(
        frame.marshal(pbody.ContentBody(b"z" * min(piece, n - i)), channel)
        for i in range(0, n, piece)
    )


def test_unfinished_bodies_over_the_limit_close_the_connection_with_506(
    capped: ServerProcess,
) -> None:
    client = _client(capped)
    for ch in (1, 2):
        client.open_channel(ch)
    # two messages of 4 MB each, both left unfinished at 600 kB: 1.2 MB buffered in total
    client.send(_start_message(1, 4_000_000) + _body(1, 600_000))
    client.send(_start_message(2, 4_000_000) + _body(2, 600_000))
    channel, close = client.next_method()
    assert channel == 0
    assert isinstance(close, commands.Connection.Close)
    assert close.reply_code == 506
    assert "max_pending_content_bytes" in close.reply_text
    assert str(LIMIT) in close.reply_text


def test_finished_messages_give_their_bytes_back(capped: ServerProcess) -> None:
    client = _client(capped)
    client.open_channel(1)
    client.send_frame(commands.Confirm.Select(), 1)
    client.expect(commands.Confirm.SelectOk)
    # ten 900 kB messages one after the other: 9 MB in all, never more than 900 kB unfinished
    for _ in range(10):
        client.send(_start_message(1, 900_000) + _body(1, 900_000))
    acked = 0
    while acked < 10:
        _, method = client.next_method()
        assert isinstance(method, commands.Basic.Ack), method
        acked = method.delivery_tag if method.multiple else acked + 1
    client.send_frame(
        commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
    )
    client.expect(commands.Connection.CloseOk)

"""Publishes in one TCP write mixing the fused fast path and the frame-by-frame path.

The server takes publish + header + one body frame in one step, and everything else
(several body frames, empty bodies, errors) frame by frame; a client must not be able to
tell the two apart.
"""

from __future__ import annotations

import socket
from typing import Any

from pamqp import body as pbody
from pamqp import commands, frame, header

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect, consume_expected


def _recv_frames(sock: socket.socket, buf: bytearray, count: int) -> list[tuple[int, object]]:
    got: list[tuple[int, object]] = []
    while len(got) < count:
        try:
            used, channel, parsed = frame.unmarshal(bytes(buf))
        except Exception:  # incomplete: read more
            chunk = sock.recv(65536)
            assert chunk, "server closed the socket"
            buf += chunk
            continue
        del buf[:used]
        got.append((channel, parsed))
    return got


def _open(sock: socket.socket, buf: bytearray) -> None:
    sock.sendall(b"AMQP\x00\x00\x09\x01")
    _recv_frames(sock, buf, 1)  # start
    sock.sendall(frame.marshal(commands.Connection.StartOk(response="\x00guest\x00guest"), 0))
    ((_, tune),) = _recv_frames(sock, buf, 1)
    assert isinstance(tune, commands.Connection.Tune)
    sock.sendall(
        frame.marshal(commands.Connection.TuneOk(2047, 4096, 0), 0)
        + frame.marshal(commands.Connection.Open("/"), 0)
    )
    ((_, ok),) = _recv_frames(sock, buf, 1)
    assert isinstance(ok, commands.Connection.OpenOk)


def _message(exchange: str, rk: str, body: bytes, split: int = 0) -> bytes:
    """Publish + header + body frames of at most ``split`` bytes (one frame when 0)."""
    props = commands.Basic.Properties(content_type="text/plain")
    out = frame.marshal(commands.Basic.Publish(exchange=exchange, routing_key=rk), 1)
    out += frame.marshal(header.ContentHeader(0, len(body), props), 1)
    step = split or max(len(body), 1)
    parts = [body[i : i + step] for i in range(0, len(body), step)]
    for part in parts:
        out += frame.marshal(pbody.ContentBody(part), 1)
    return out


def _read_stream(server: ServerProcess, stream: str, count: int) -> list[tuple[Any, Any, bytes]]:
    """The stream's first ``count`` messages as a pika consumer gets them (from ``first``)."""
    conn = connect(server)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=500)
    got = consume_expected(ch, stream, count, {"x-stream-offset": "first"})
    conn.close()
    return got


def test_fast_and_slow_publishes_in_one_write_confirm_and_store_alike(
    server: ServerProcess,
) -> None:
    stream = "s-publish-paths"
    with socket.create_connection((server.host, server.amqp_port), timeout=5) as sock:
        buf = bytearray()
        _open(sock, buf)
        sock.sendall(
            frame.marshal(commands.Channel.Open(), 1)
            + frame.marshal(commands.Confirm.Select(), 1)
            + frame.marshal(
                commands.Queue.Declare(
                    queue=stream, durable=True, arguments={"x-queue-type": "stream"}
                ),
                1,
            )
        )
        _recv_frames(sock, buf, 3)  # open-ok, select-ok, declare-ok
        big = bytes(range(256)) * 40  # 10 KiB: more than one 4 KiB frame
        sock.sendall(
            _message("", stream, b"one")  # fast path
            + _message("", stream, b"two-split", split=4)  # two body frames
            + _message("", stream, b"")  # no body frame at all
            + _message("", stream, big, split=4000)
            + _message("", stream, b"five")  # fast path again after the slow ones
        )
        replies: list[tuple[int, object]] = []
        while not any(getattr(r, "delivery_tag", 0) == 5 for _, r in replies):
            replies += _recv_frames(sock, buf, 1)
        assert all(isinstance(r, commands.Basic.Ack) for _, r in replies)
        # an error on the fast path mid-read: the rest of the read is dropped, as before
        sock.sendall(
            _message("no-such-exchange", "k", b"six")  # 404 closes the channel
            + _message("", stream, b"seven")  # dropped: the channel is closing
        )
        replies = _recv_frames(sock, buf, 1)
        close = replies[-1][1]
        assert isinstance(close, commands.Channel.Close)
        assert close.reply_code == 404
        assert "no-such-exchange" in close.reply_text

    got = _read_stream(server, stream, 5)
    assert [props.content_type for _, props, _ in got] == ["text/plain"] * 5
    assert [body for _, _, body in got] == [b"one", b"two-split", b"", big, b"five"]


def test_a_window_sent_in_one_write_is_confirmed_and_stored_in_order(
    server: ServerProcess,
) -> None:
    """Several hundred KB in one write: the server handles the read in slices (confirms of
    the first messages go out while it works on the rest); messages whose frames straddle a
    slice boundary, split bodies and empty ones among them, are all stored, in order."""
    stream = "s-publish-window"
    count = 3000
    with socket.create_connection((server.host, server.amqp_port), timeout=10) as sock:
        buf = bytearray()
        _open(sock, buf)
        sock.sendall(
            frame.marshal(commands.Channel.Open(), 1)
            + frame.marshal(commands.Confirm.Select(), 1)
            + frame.marshal(
                commands.Queue.Declare(
                    queue=stream, durable=True, arguments={"x-queue-type": "stream"}
                ),
                1,
            )
        )
        _recv_frames(sock, buf, 3)
        bodies = [b"" if i % 97 == 0 else f"{i:06d}".encode() * (1 + i % 30) for i in range(count)]
        sock.sendall(
            b"".join(
                _message("", stream, body, split=7 if i % 13 == 0 else 0)
                for i, body in enumerate(bodies)
            )
        )
        acked = 0
        while acked < count:
            for _, reply in _recv_frames(sock, buf, 1):
                assert isinstance(reply, commands.Basic.Ack), reply
                acked = max(acked, reply.delivery_tag)
        assert acked == count

    assert [body for _, _, body in _read_stream(server, stream, count)] == bodies

"""Stream-protocol publisher flow control: a client that publishes without reading its
confirms is held (the server stops reading its socket), other connections keep working, and
once the client reads, every message is stored and confirmed.

The server stops reading at 50,000 unconfirmed messages (RabbitMQ's publish credits, unit
tests in tests/unit/test_gateway/test_streamproto_session/test_publish_credits.py) or when the
confirms it cannot send fill the connection's write buffer, whichever comes first; here the client's
small receive buffer makes the second one bite."""

from __future__ import annotations

import struct
import threading
import time

from sievemq.testing import ServerProcess
from sievemq.testing.stream_client import RawStreamClient, string

# the unread confirms (8 bytes per message) must overflow the kernel's socket buffers before
# the server holds the publisher: with net.ipv4.tcp_wmem's 4 MiB maximum it held at ~412,000
TOTAL = 1_000_000
PER_FRAME = 100
BODY = b"0123456789"


def _publish_frame(first_id: int) -> bytes:
    entries = b"".join(struct.pack(">QI", first_id + i, len(BODY)) + BODY for i in range(PER_FRAME))
    body = struct.pack(">Bi", 0, PER_FRAME) + entries
    return struct.pack(">IHH", len(body) + 4, 2, 1) + body


def _stored(raw: RawStreamClient, stream: str) -> int:
    """Messages in the stream, from StreamStats' committed_offset (asked on ``raw``)."""
    raw.request(28, string(stream))
    key, _, body = raw.read_frame()
    assert key == 0x801C and struct.unpack_from(">H", body, 4)[0] == 1
    (count,) = struct.unpack_from(">i", body, 6)
    pos = 10
    for _ in range(count):
        (n,) = struct.unpack_from(">H", body, pos)
        name = body[pos + 2 : pos + 2 + n].decode()
        (value,) = struct.unpack_from(">q", body, pos + 2 + n)
        pos += 2 + n + 8
        if name == "committed_offset":
            return int(value) + 1
    raise AssertionError("no committed_offset in StreamStats")


def _wait_stable(raw: RawStreamClient, stream: str, at_least: int, timeout: float = 30.0) -> int:
    """The stored count once it reached ``at_least`` and stopped growing for a second."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        now = _stored(raw, stream)
        if now != last:
            last, since = now, time.monotonic()
        elif now >= at_least and time.monotonic() - since >= 1.0:
            return now
        time.sleep(0.05)
    raise AssertionError(f"stored count did not settle at >= {at_least}: {last}")


def test_publisher_without_reading_confirms_is_held_at_50000_credits(
    server: ServerProcess, qname: str
) -> None:
    pub = RawStreamClient(server, rcvbuf=4096)
    other = RawStreamClient(server)
    try:
        assert pub.open() == 1 and other.open() == 1
        pub.request(13, string(qname) + struct.pack(">i", 0))  # Create
        assert struct.unpack_from(">H", pub.read_frame()[2], 4)[0] == 1
        pub.request(1, struct.pack(">B", 0) + string("") + string(qname))  # DeclarePublisher
        assert struct.unpack_from(">H", pub.read_frame()[2], 4)[0] == 1

        frames = [_publish_frame(1 + i) for i in range(0, TOTAL, PER_FRAME)]
        sender = threading.Thread(
            target=lambda: pub.sock.sendall(b"".join(frames)), daemon=True
        )  # blocks once the server stops reading and the socket buffers are full
        pub.sock.settimeout(None)
        sender.start()

        held_at = _wait_stable(other, qname, 1)
        assert held_at < TOTAL, held_at  # the server stopped reading the publisher

        # the held connection does not hold anyone else: the other one still publishes
        other.request(1, struct.pack(">B", 3) + string("") + string(qname))
        assert struct.unpack_from(">H", other.read_frame()[2], 4)[0] == 1
        other.send(2, struct.pack(">BiQI", 3, 1, 7, 2) + b"ok")
        key, _, body = other.read_frame()
        assert key == 3 and struct.unpack(">BiQ", body) == (3, 1, 7)  # PublishConfirm of id 7

        # the client reads its confirms now: credits come back, reading resumes, all confirm
        confirmed: set[int] = set()
        pub.sock.settimeout(30)
        while len(confirmed) < TOTAL:
            key, _, body = pub.read_frame()
            assert key == 3, f"unexpected frame {key}"  # PublishConfirm only, no error
            (count,) = struct.unpack_from(">i", body, 1)
            confirmed.update(struct.unpack_from(f">{count}Q", body, 5))
        assert confirmed == set(range(1, TOTAL + 1))
        sender.join(10)
        assert _wait_stable(other, qname, TOTAL + 1) == TOTAL + 1  # + the other's message
    finally:
        pub.close()
        other.close()

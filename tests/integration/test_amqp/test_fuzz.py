"""Garbage over real sockets never kills the server or disturbs other connections.

Each hypothesis example opens a connection, completes the handshake, opens a channel and
then sends random bytes, random frames or well-formed method frames with random arguments.
Meanwhile a canary connection in another thread publishes with confirms and consumes its
own messages; at the end it must have received every message it published, in order.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.canary import Canary
from sievemq.testing import ServerProcess
from sievemq.testing.raw import RawClient

pytestmark = pytest.mark.timeout(90)

# (class, method) ids of AMQP 0-9-1 methods a client may send
METHOD_IDS = [(10, 11), (10, 31), (10, 40), (10, 50), (10, 51), (20, 10), (20, 20), (20, 40),
              (20, 41), (40, 10), (40, 20), (40, 30), (40, 40), (50, 10), (50, 20), (50, 30),
              (50, 40), (50, 50), (60, 10), (60, 20), (60, 30), (60, 40), (60, 70), (60, 80),
              (60, 90), (60, 100), (60, 110), (60, 120), (85, 10), (90, 10), (90, 20),
              (90, 30)]  # fmt: skip


def frame(kind: int, channel: int, payload: bytes, end: bytes = b"\xce") -> bytes:
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + end


random_frame = st.builds(
    frame,
    st.sampled_from([1, 2, 3, 4, 8]) | st.integers(0, 255),
    st.integers(0, 3),
    st.binary(max_size=200),
    st.sampled_from([b"\xce"]) | st.binary(min_size=1, max_size=1),
)
random_method = st.builds(
    lambda ids, channel, args: frame(1, channel, struct.pack(">HH", *ids) + args),
    st.sampled_from(METHOD_IDS),
    st.integers(0, 2),
    st.binary(max_size=120),
)
content_header = st.builds(
    lambda channel, size, props: frame(2, channel, struct.pack(">HHQ", 60, 0, size) + props),
    st.integers(0, 2),
    st.integers(0, 2**64 - 1),
    st.binary(max_size=60),
)
garbage = st.lists(
    st.binary(min_size=1, max_size=400) | random_frame | random_method | content_header,
    min_size=1,
    max_size=6,
).map(b"".join)


def test_garbage_never_kills_the_server(server: ServerProcess) -> None:
    canary = Canary(server.url, prefetch=10, drain_s=20)  # ends once all came back
    canary.start()
    examples = 0

    @settings(
        max_examples=60,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(data=garbage)
    def send_garbage(data: bytes) -> None:
        nonlocal examples
        examples += 1
        client = RawClient(server.host, server.amqp_port, timeout=10)
        client.handshake()
        client.open_channel()
        try:
            client.send(data)
            # read whatever the server answers (close, error, nothing) for a moment
            client.recv_some(timeout=0.05)
        except OSError:
            pass  # the server may already have closed the connection: that is fine
        finally:
            client.close()
        assert server.running, f"server died on {data!r}\n{server.stderr()}"

    try:
        send_garbage()
    finally:
        canary.stop_event.set()
        canary.join(15)
    assert examples > 0
    assert canary.error is None, f"canary connection failed: {canary.error!r}"
    assert len(canary.published) > 0
    assert canary.received == canary.published

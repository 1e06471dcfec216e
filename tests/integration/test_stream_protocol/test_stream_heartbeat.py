"""Stream-protocol heartbeats, with the interval the client's Tune asks for: the server sends a
Heartbeat when it has been silent for an interval, drops a peer silent for two, and keeps a
peer that beats. Raw sockets, since rstream's heartbeat task cannot be silenced or timed."""

from __future__ import annotations

import struct
import threading
import time

import pytest

from sievemq.streamproto import wire
from sievemq.testing import ServerProcess
from sievemq.testing.stream_client import RawStreamClient

pytestmark = pytest.mark.timeout(120)

INTERVAL_S = 2  # long enough that a loaded machine does not starve a beating client


def _open_with_heartbeat(server: ServerProcess, interval: int) -> RawStreamClient:
    raw = RawStreamClient(server)
    raw.sock.settimeout(30)
    assert raw.open(heartbeat=interval) == wire.OK
    return raw


def test_silent_server_sends_heartbeats_and_a_silent_peer_is_dropped(
    server: ServerProcess,
) -> None:
    raw = _open_with_heartbeat(server, INTERVAL_S)
    try:
        started = time.monotonic()
        key, _, body = raw.read_frame()  # the server has nothing else to say
        assert (key, body) == (wire.HEARTBEAT, b"")
        # the client never answers: after two silent intervals the server closes
        with pytest.raises((EOFError, ConnectionResetError)):
            while True:
                key, _, _ = raw.read_frame()
                assert key == wire.HEARTBEAT
        assert time.monotonic() - started >= 2 * INTERVAL_S
    finally:
        raw.close()


def test_a_peer_that_beats_stays_connected(server: ServerProcess) -> None:
    raw = _open_with_heartbeat(server, INTERVAL_S)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(0.2):
            raw.send(wire.HEARTBEAT, b"")

    beater = threading.Thread(target=beat, daemon=True)
    beater.start()
    try:
        time.sleep(3 * INTERVAL_S)  # longer than the two silent intervals that drop a peer
        stop.set()
        beater.join()
        # still open: a request is answered
        raw.request(wire.EXCHANGE_COMMAND_VERSIONS, struct.pack(">i", 0))
        while True:
            key, _, body = raw.read_frame()
            if key != wire.HEARTBEAT:
                break
        assert key == wire.EXCHANGE_COMMAND_VERSIONS | wire.RESPONSE
        assert struct.unpack_from(">H", body, 4)[0] == wire.OK
    finally:
        stop.set()
        raw.close()

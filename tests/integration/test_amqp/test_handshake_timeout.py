"""The handshake timeout runs from the moment a socket connects.

A peer that connects and sends nothing, or only part of the protocol header, used to hold a
``max_connections`` slot forever: the timer started only once the header had arrived.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.raw import PROTOCOL_HEADER, Closed, RawClient

pytestmark = pytest.mark.timeout(120)  # a hang guard, with room for a starved machine


@pytest.fixture
def strict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerProcess]:
    monkeypatch.setenv("SIEVEMQ_HANDSHAKE_TIMEOUT_S", "1")
    proc = ServerProcess(tmp_path / "data", ("--max-connections", "2")).start()
    yield proc
    assert proc.stop() == 0, proc.stderr()


def closed_by_server_within(sock: socket.socket, seconds: float) -> float:
    """Seconds until the server closed ``sock`` (EOF or reset); fails after ``seconds``."""
    start = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass  # a connection.start (header sent) is fine, we wait for the close
    except ConnectionResetError:
        pass
    except TimeoutError:
        pytest.fail(f"server did not close the socket within {seconds}s")
    return time.monotonic() - start


def test_silent_sockets_are_closed_and_free_their_slots(strict: ServerProcess) -> None:
    silent = socket.create_connection((strict.host, strict.amqp_port))
    partial = socket.create_connection((strict.host, strict.amqp_port))
    partial.sendall(PROTOCOL_HEADER[:3])  # b"AMQ" and nothing more
    time.sleep(0.2)
    # both slots are taken: a third client is turned away before any negotiation
    turned_away = RawClient(strict.host, strict.amqp_port)
    with pytest.raises((Closed, OSError)):
        turned_away.handshake()
    turned_away.close()
    for sock in (silent, partial):
        assert closed_by_server_within(sock, 2.5) < 2.5
        sock.close()
    client = RawClient(strict.host, strict.amqp_port)
    client.handshake()
    client.open_channel(1)
    client.close()


def test_header_then_silence_is_still_dropped(strict: ServerProcess) -> None:
    sock = socket.create_connection((strict.host, strict.amqp_port))
    sock.sendall(PROTOCOL_HEADER)  # gets connection.start, never answers
    assert closed_by_server_within(sock, 2.5) < 2.5
    sock.close()


def test_an_open_connection_outlives_the_handshake_timeout(strict: ServerProcess) -> None:
    client = RawClient(strict.host, strict.amqp_port)
    client.handshake()
    time.sleep(1.5)
    client.open_channel(1)  # still served after the timer fired
    client.close()

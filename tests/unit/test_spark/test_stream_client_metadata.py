"""The network client follows Metadata to the node that holds a stream (a replica first, else
the leader), against two scripted Stream-protocol nodes on loopback (a cluster's Metadata
answer with several brokers, which one SieveMQ node cannot give yet)."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from sievemq.spark.stream_client import StreamURI, connect
from sievemq.streamproto import wire

Broker = tuple[int, str, int]  # reference, host, port


def _metadata(corr: int, brokers: list[Broker], leader: int, replicas: list[int]) -> bytes:
    body = struct.pack(">Ii", corr, len(brokers))
    for ref, host, port in brokers:
        body += struct.pack(">H", ref) + wire.enc_string(host) + struct.pack(">I", port)
    body += struct.pack(">i", 1) + wire.enc_string("s") + struct.pack(">HH", wire.OK, leader)
    body += struct.pack(">i", len(replicas)) + b"".join(struct.pack(">H", r) for r in replicas)
    return wire.frame(wire.METADATA | wire.RESPONSE, body)


class Node:
    """A node that completes the handshake and answers Metadata as told; records its peers."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.answer: tuple[list[Broker], int, list[int]] = ([], 0, [])
        self.sessions = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.sessions += 1
            threading.Thread(target=self._session, args=(conn,), daemon=True).start()

    def _session(self, conn: socket.socket) -> None:
        data = b""
        with conn:
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
                frames, used, _ = wire.frames_from(data, 0, 1 << 20)
                data = data[used:]
                for f in frames:
                    corr = struct.unpack_from(">I", f.body)[0] if f.key != wire.TUNE else 0
                    if f.key == wire.PEER_PROPERTIES:
                        conn.sendall(wire.peer_properties_response(corr, {}))
                    elif f.key == wire.SASL_HANDSHAKE:
                        conn.sendall(wire.sasl_handshake_response(corr, ["PLAIN"]))
                    elif f.key == wire.SASL_AUTHENTICATE:
                        conn.sendall(wire.response(wire.SASL_AUTHENTICATE, corr, wire.OK))
                        conn.sendall(wire.tune(1 << 20, 0))
                    elif f.key == wire.OPEN:
                        conn.sendall(wire.open_response(corr, wire.OK, {}))
                    elif f.key == wire.METADATA:
                        conn.sendall(_metadata(corr, *self.answer))
                    elif f.key == wire.CLOSE:
                        conn.sendall(wire.response(wire.CLOSE, corr, wire.OK))
                        return

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def nodes() -> Iterator[tuple[Node, Node, Node]]:
    three = (Node(), Node(), Node())
    yield three
    for node in three:
        node.close()


def test_the_client_goes_to_the_leader_or_a_replica(nodes: tuple[Node, Node, Node]) -> None:
    entry, leader, replica = nodes
    brokers = [(0, "127.0.0.1", entry.port), (1, "127.0.0.1", leader.port)]
    brokers.append((2, "127.0.0.1", replica.port))
    uri = StreamURI.parse(f"rabbitmq-stream://guest:guest@127.0.0.1:{entry.port}/%2F")

    entry.answer = (brokers, 1, [])  # only a leader: the client moves to it
    with connect(uri, "s") as client:
        assert client.uri.port == leader.port
    entry.answer = (brokers, 1, [2])  # a replica: read there, as RabbitMQ's clients do
    with connect(uri, "s") as client:
        assert client.uri.port == replica.port
    entry.answer = (brokers, 1, [0])  # the entry node holds a replica: stay
    with connect(uri, "s") as client:
        assert client.uri.port == entry.port
    assert (entry.sessions, leader.sessions, replica.sessions) == (3, 1, 1)

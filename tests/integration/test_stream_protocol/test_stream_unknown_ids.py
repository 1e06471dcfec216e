"""Frames naming a publisher or a subscription the connection does not have get RabbitMQ's
answers and leave the connection working: Publish -> PublishError 18 per message, Credit ->
the Credit error frame (0x8009) with code 4, DeletePublisher -> 18, Unsubscribe -> 4.
Raw frames: rstream never sends these for ids it has not declared."""

from __future__ import annotations

import struct

from sievemq.streamproto import wire
from sievemq.testing import ServerProcess
from sievemq.testing.stream_client import RawStreamClient


def _next_not_heartbeat(raw: RawStreamClient) -> tuple[int, bytes]:
    while True:
        key, _, body = raw.read_frame()
        if key != wire.HEARTBEAT:
            return key, body


def _code(body: bytes) -> int:
    return int(struct.unpack_from(">H", body, 4)[0])  # after the correlation id


def test_unknown_publisher_and_subscription_ids(server: ServerProcess) -> None:
    raw = RawStreamClient(server)
    try:
        assert raw.open() == wire.OK
        # Publish v1 from publisher 9, never declared: two messages, ids 5 and 6
        entries = b"".join(struct.pack(">QI", i, 1) + b"x" for i in (5, 6))
        raw.send(wire.PUBLISH, struct.pack(">Bi", 9, 2) + entries)
        key, body = _next_not_heartbeat(raw)
        assert key == wire.PUBLISH_ERROR
        assert struct.unpack_from(">Bi", body) == (9, 2)
        errors = [struct.unpack_from(">QH", body, 5 + 10 * i) for i in range(2)]
        assert errors == [(5, wire.PUBLISHER_DOES_NOT_EXIST), (6, wire.PUBLISHER_DOES_NOT_EXIST)]

        raw.send(wire.CREDIT, struct.pack(">BH", 7, 10))  # subscription 7: none
        key, body = _next_not_heartbeat(raw)
        assert key == wire.CREDIT | wire.RESPONSE
        assert struct.unpack(">HB", body) == (wire.SUBSCRIPTION_ID_DOES_NOT_EXIST, 7)

        raw.request(wire.DELETE_PUBLISHER, struct.pack(">B", 9))
        key, body = _next_not_heartbeat(raw)
        assert key == wire.DELETE_PUBLISHER | wire.RESPONSE
        assert _code(body) == wire.PUBLISHER_DOES_NOT_EXIST

        raw.request(wire.UNSUBSCRIBE, struct.pack(">B", 7))
        key, body = _next_not_heartbeat(raw)
        assert key == wire.UNSUBSCRIBE | wire.RESPONSE
        assert _code(body) == wire.SUBSCRIPTION_ID_DOES_NOT_EXIST

        # the connection still works
        raw.request(wire.EXCHANGE_COMMAND_VERSIONS, struct.pack(">i", 0))
        key, body = _next_not_heartbeat(raw)
        assert key == wire.EXCHANGE_COMMAND_VERSIONS | wire.RESPONSE and _code(body) == wire.OK
    finally:
        raw.close()

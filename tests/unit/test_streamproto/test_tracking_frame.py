"""SieveMQ's TRACKING frame: a leader's named-consumer offsets on a replica's subscription."""

from __future__ import annotations

import struct

import pytest

from sievemq.streamproto import wire


def _body(frame: bytes) -> tuple[int, bytes]:
    size, key, version = struct.unpack_from(">IHH", frame)
    assert size == len(frame) - 4 and version == 1
    return key, frame[8:]


def test_a_snapshot_and_a_delta_round_trip() -> None:
    key, body = _body(wire.tracking(True, [("reader", 7), ("é", 0)]))
    assert key == wire.TRACKING
    assert wire.parse_tracking(body) == (True, [("reader", 7), ("é", 0)])
    _, body = _body(wire.tracking(False, [("gone", None)]))
    assert wire.parse_tracking(body) == (False, [("gone", None)])
    _, body = _body(wire.tracking(True, []))
    assert wire.parse_tracking(body) == (True, [])


def test_a_cut_frame_is_a_frame_error() -> None:
    _, body = _body(wire.tracking(False, [("reader", 7)]))
    with pytest.raises(wire.FrameError):
        wire.parse_tracking(body[:-3])


def test_the_subscriptions_frame_carries_the_file_as_it_is() -> None:
    raw = b'{"version": 1, "slots": []}'
    key, body = _body(wire.subscriptions(raw))
    assert key == wire.SUBSCRIPTIONS
    assert wire.parse_subscriptions(body) == raw


def test_the_committed_frame_carries_the_leader_s_committed_offset() -> None:
    key, body = _body(wire.committed(12345))
    assert key == wire.COMMITTED
    assert wire.parse_committed(body) == 12345

"""The frames of a quorum queue's log feed on the inter-node link (sans-I/O).

A node holding a replica of a quorum queue opens a link channel to the queue's leader with
``FEED_TARGET`` in channel.open's reserved field (``cluster/link.py``); on that channel the
two nodes speak these frames, of SieveMQ's own method class ``FEED_CLASS`` (no client sends
it: only a link connection opens such a channel):

- replica to leader, ``HELLO``: ``u64 epoch | u64 next | name (UTF-8, the rest)``: follow
  queue ``name`` from log id ``next`` (the copy holds every live record below it);
- replica to leader, ``HOLDS``: ``u64 epoch | u64 next``: the copy now holds every live record
  below ``next`` (written, and fdatasynced as its ``--fsync`` says);
- leader to replica, ``OPS``: ``u64 size``, then body frames carrying ``size`` bytes: log
  operations (``cluster/quorum_replication.py`` encodes them);
- leader to replica, ``BEAT``: ``u64 committed``: the end of what the leader committed (every
  id below it is held by a majority), sent when the feed carried nothing for a while: a
  replica that hears nothing from its running leader for the lease's TTL counts it lost
  (``cluster/failover.py``), so an idle queue's leader must be heard too.
"""

from __future__ import annotations

import struct
from typing import Final

from sievemq.amqp import frames

FEED_TARGET: Final = "\x00quorum-feed"
FEED_CLASS: Final = 0x7E51
HELLO: Final = 1
HOLDS: Final = 2
OPS: Final = 3
BEAT: Final = 4
FEED_CLASS_BYTES: Final = struct.pack(">H", FEED_CLASS)

_METHOD = struct.Struct(">BHIHH")
_TWO = struct.Struct(">QQ")
_U64 = struct.Struct(">Q")
_BODY = struct.Struct(">BHI")


def _method(channel: int, method: int, args: bytes) -> bytes:
    return (
        _METHOD.pack(frames.FRAME_METHOD, channel, 4 + len(args), FEED_CLASS, method)
        + args
        + frames.FRAME_END_BYTE
    )


def hello(channel: int, epoch: int, next_id: int, name: str) -> bytes:
    return _method(channel, HELLO, _TWO.pack(epoch, next_id) + name.encode("utf-8"))


def holds(channel: int, epoch: int, next_id: int) -> bytes:
    return _method(channel, HOLDS, _TWO.pack(epoch, next_id))


def beat(channel: int, committed: int) -> bytes:
    return _method(channel, BEAT, _U64.pack(committed))


def ops(channel: int, data: bytes, frame_max: int) -> list[bytes]:
    """An OPS method frame and the body frames carrying ``data`` (split by ``frame_max``)."""
    out = [_method(channel, OPS, _U64.pack(len(data)))]
    step = frame_max - frames.FRAME_OVERHEAD
    view = memoryview(data)
    for at in range(0, len(data), step):
        part = bytes(view[at : at + step])
        out += (_BODY.pack(frames.FRAME_BODY, channel, len(part)), part, frames.FRAME_END_BYTE)
    return out


def is_feed(payload: bytes) -> bool:
    """Whether a method frame's payload is one of the feed's."""
    return payload[:2] == FEED_CLASS_BYTES


def method_of(payload: bytes) -> int:
    return int.from_bytes(payload[2:4], "big")


def parse_hello(payload: bytes) -> tuple[int, int, str]:
    """(epoch, next id, queue name) of a HELLO."""
    epoch, next_id = _TWO.unpack_from(payload, 4)
    return epoch, next_id, payload[20:].decode("utf-8")


def parse_holds(payload: bytes) -> tuple[int, int]:
    """(epoch, next id) of a HOLDS."""
    epoch, next_id = _TWO.unpack_from(payload, 4)
    return int(epoch), int(next_id)


def parse_ops_size(payload: bytes) -> int:
    return int(_U64.unpack_from(payload, 4)[0])


def parse_beat(payload: bytes) -> int:
    """The committed end a BEAT carries."""
    return int(_U64.unpack_from(payload, 4)[0])

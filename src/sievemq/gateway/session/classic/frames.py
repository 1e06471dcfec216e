"""Frames of classic-queue deliveries: basic.deliver and basic.get-ok with the redelivered bit.

Properties go out exactly as published (no ``x-stream-offset`` splice, unlike streams).
"""

from __future__ import annotations

import struct
from typing import Final

from sievemq.amqp import hotcodec

_END: Final = b"\xce"
_METHOD_HEAD = struct.Struct(">BHIHH")
_QB = struct.Struct(">QB")
_I = struct.Struct(">I")
_CACHE_MAX: Final = 1024


class ClassicDeliveryEncoder:
    """basic.deliver + content for one consumer (method parts cached per exchange/key)."""

    __slots__ = ("_channel", "_ctag", "_method", "frame_max")

    def __init__(self, channel: int, consumer_tag: str, frame_max: int) -> None:
        self._channel = channel
        self._ctag = hotcodec.encode_shortstr(consumer_tag)
        self.frame_max = frame_max
        self._method: dict[tuple[str, str], tuple[bytes, bytes]] = {}

    def encode(
        self,
        out: list[bytes],
        tag: int,
        redelivered: bool,
        exchange: str,
        routing_key: str,
        properties: bytes,
        body: bytes,
    ) -> None:
        parts = self._method.get((exchange, routing_key))
        if parts is None:
            ex = hotcodec.encode_shortstr(exchange)
            rk = hotcodec.encode_shortstr(routing_key)
            ct = self._ctag
            size = 13 + len(ct) + len(ex) + len(rk)
            parts = (_METHOD_HEAD.pack(1, self._channel, size, 60, 60) + ct, ex + rk + _END)
            if len(self._method) >= _CACHE_MAX:
                self._method.clear()
            self._method[exchange, routing_key] = parts
        out.append(parts[0])
        out.append(_QB.pack(tag, 1 if redelivered else 0))
        out.append(parts[1])
        hotcodec.encode_content(out, self._channel, properties, body, self.frame_max)


def encode_get_ok(
    channel: int,
    tag: int,
    redelivered: bool,
    exchange: str,
    routing_key: str,
    message_count: int,
    properties: bytes,
    body: bytes,
    frame_max: int,
) -> list[bytes]:
    ex = hotcodec.encode_shortstr(exchange)
    rk = hotcodec.encode_shortstr(routing_key)
    out = [
        _METHOD_HEAD.pack(1, channel, 4 + 9 + len(ex) + len(rk) + 4, 60, 71),
        _QB.pack(tag, 1 if redelivered else 0),
        ex,
        rk,
        _I.pack(message_count),
        _END,
    ]
    return hotcodec.encode_content(out, channel, properties, body, frame_max)

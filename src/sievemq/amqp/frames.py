"""AMQP 0-9-1 framing: split a byte stream into (type, channel, payload) frames.

HOT PATH: every byte a client sends passes through ``FrameReader.feed``. It parses straight
from the bytes the transport hands over, slices each payload exactly once, and only keeps a
buffer for the one incomplete frame at the end of a read. It checks the frame structure only
(type, size, frame-end octet); what a frame means is for ``codec`` and ``states``.
"""

from __future__ import annotations

import struct
from typing import Final

from sievemq.amqp import errors

PROTOCOL_HEADER: Final = b"AMQP\x00\x00\x09\x01"
PROTOCOL_HEADER_SIZE: Final = 8

FRAME_METHOD: Final = 1
FRAME_HEADER: Final = 2
FRAME_BODY: Final = 3
FRAME_HEARTBEAT: Final = 8
FRAME_END: Final = 0xCE
FRAME_END_BYTE: Final = b"\xce"
FRAME_HEADER_SIZE: Final = 7  # type (octet) + channel (short) + size (long)
FRAME_OVERHEAD: Final = 8  # header + frame-end octet: payload limit is frame_max - 8
FRAME_MIN_SIZE: Final = 4096  # spec: a peer must accept frames of this size before tune

_FRAME_TYPES: Final = frozenset((FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT))
_HEAD: Final = struct.Struct(">BHI")

Frame = tuple[int, int, bytes]


def check_protocol_header(data: bytes) -> bool | None:
    """Judge the first bytes of a connection (spec 4.2.2).

    ``None``: read more (fewer than 8 bytes that begin as an AMQP header does: all 8 are
    waited for, so a refusal can name the version asked for). ``True``: AMQP 0-9-1, consume
    8 bytes and start negotiating. ``False``: anything else; write ``PROTOCOL_HEADER`` back
    and close the socket (what a RabbitMQ without the AMQP 1.0 plugin does).
    """
    if len(data) < PROTOCOL_HEADER_SIZE:
        return None if _AMQP.startswith(bytes(data[:4])) else False
    return bytes(data[:PROTOCOL_HEADER_SIZE]) == PROTOCOL_HEADER


_AMQP: Final = b"AMQP"
# AMQP headers other than ours, by the 4 bytes after "AMQP" (AMQP 1.0 section 2.2; the
# pre-1.0 ones as RabbitMQ's reader knows them)
_OTHER_AMQP: Final = {
    b"\x00\x01\x00\x00": "AMQP 1.0",
    b"\x03\x01\x00\x00": "AMQP 1.0 (SASL layer)",
    b"\x02\x01\x00\x00": "AMQP 1.0 (TLS layer)",
    b"\x01\x01\x00\x0a": "AMQP 0-10",
    b"\x01\x01\x00\x09": "AMQP 0-9",
    b"\x01\x01\x08\x00": "AMQP 0-8",
    b"\x01\x01\x09\x01": "AMQP 0-9-1 (the old header form)",
}


def describe_protocol_header(data: bytes) -> str:
    """What a refused header asked for, in words, for the log ("AMQP 1.0", "HTTP", ...)."""
    head = bytes(data[:PROTOCOL_HEADER_SIZE])
    if head.startswith(_AMQP):
        known = _OTHER_AMQP.get(head[4:])
        return known or f"an unknown AMQP version (header {head!r})"
    if head[:1] == b"\x16":
        return "TLS (a TLS client on the plain-text port)"
    if head.split(b" ", 1)[0] in (b"GET", b"POST", b"PUT", b"HEAD", b"DELETE", b"OPTIONS"):
        return "HTTP"
    return f"no AMQP protocol (first bytes {head!r})"


class FrameReader:
    """Incremental frame splitter: bytes in, complete frames out.

    ``frame_max`` is the largest whole frame accepted (header and frame-end included, as
    negotiated by Connection.Tune); lower it after tuning. ``max_buffer`` caps the bytes held
    for an incomplete frame, so a peer cannot make us hold more than that.
    """

    __slots__ = ("_buf", "_need", "frame_max", "max_buffer")

    def __init__(self, frame_max: int, max_buffer: int) -> None:
        if frame_max < FRAME_OVERHEAD:
            raise ValueError(f"frame_max must be at least {FRAME_OVERHEAD}")
        self.frame_max = frame_max
        self.max_buffer = max_buffer
        self._buf = bytearray()
        self._need = 0  # bytes the buffered frame needs before it can be parsed

    @property
    def buffered(self) -> int:
        """Bytes held for a frame that is not complete yet."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Add received bytes; return every frame they complete, in order.

        Raises ``errors.FrameError`` (501) for an unknown frame type, a frame larger than
        ``frame_max``, a bad frame-end octet or a heartbeat off channel 0, and
        ``errors.ResourceError`` (506) when more than ``max_buffer`` bytes stay unparsed.
        After an error the reader is unusable: the connection must close.
        """
        if type(data) is not bytes:
            data = bytes(data)
        out: list[Frame] = []
        pos = 0
        buf = self._buf
        while buf:
            # complete the buffered frame from the front of ``data`` only: the rest of the
            # read is parsed in place, never copied into the buffer
            take = self._need - len(buf)
            if take > len(data) - pos:
                buf += memoryview(data)[pos:]
                self._check_buffer(len(buf))
                return out
            buf += memoryview(data)[pos : pos + take]
            pos += take
            head = bytes(buf)
            buf.clear()
            self._parse(head, 0, out)  # a whole frame, or a whole header (then buffered again)
        self._parse(data, pos, out)
        return out

    def _parse(self, src: bytes, pos: int, out: list[Frame]) -> None:
        """Append the complete frames of ``src[pos:]`` to ``out``; buffer the incomplete tail."""
        n = len(src)
        append = out.append
        limit = self.frame_max - FRAME_OVERHEAD
        unpack = _HEAD.unpack_from
        types = _FRAME_TYPES
        while n - pos >= FRAME_HEADER_SIZE:
            ftype, channel, size = unpack(src, pos)
            if ftype not in types:
                raise errors.FrameError(f"unknown frame type {ftype}")
            if size > limit:
                raise errors.FrameError(
                    f"frame size {size + FRAME_OVERHEAD} larger than frame_max {self.frame_max}"
                )
            end = pos + FRAME_HEADER_SIZE + size
            if end >= n:
                self._need = end + 1 - pos
                break
            if src[end] != FRAME_END:
                raise errors.FrameError(f"bad frame end octet 0x{src[end]:02x}")
            if ftype == FRAME_HEARTBEAT and channel:
                raise errors.FrameError(f"heartbeat frame on channel {channel}")
            append((ftype, channel, src[pos + 7 : end]))
            pos = end + 1
        else:
            self._need = FRAME_HEADER_SIZE
        if pos < n:
            self._check_buffer(n - pos)
            self._buf += memoryview(src)[pos:]

    def _check_buffer(self, size: int) -> None:
        if size > self.max_buffer:
            raise errors.ResourceError(
                f"{size} unparsed bytes buffered, more than the limit of {self.max_buffer}"
            )

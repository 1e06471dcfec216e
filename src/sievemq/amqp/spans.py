"""Frames as spans of a read (the inter-node link's read path): whole frames as ONE
bytes object and where each one starts.

A node relaying a leader's deliveries to its client reads three frames per message; a
``(type, channel, payload)`` tuple and a payload copy per frame cost more than the relay
itself. ``SpanReader.feed`` returns the read's whole frames as they arrived (one bytes
object) and the offset of each, ending with the offset past the last: frame ``i`` is
``src[starts[i]:starts[i + 1]]``, its payload ``src[starts[i] + 7:starts[i + 1] - 1]``. A
receiver patches channel numbers and delivery tags into a copy of a run of them and writes
it in one call (``gateway.session.remote``). Frames are checked as ``amqp.frames.FrameReader``
checks them (type, size, frame end, heartbeat channel).
"""

from __future__ import annotations

import struct
from typing import Final

from sievemq.amqp import errors, frames

_HEAD: Final = struct.Struct(">BHI")
_TYPES: Final = frozenset(
    (frames.FRAME_METHOD, frames.FRAME_HEADER, frames.FRAME_BODY, frames.FRAME_HEARTBEAT)
)
_EMPTY: Final = b""


class SpanReader:
    """Incremental frame splitter: bytes in, (whole frames, their starts) out.

    ``frame_max`` is the largest whole frame accepted (lower it after tuning);
    ``max_buffer`` caps the bytes held for an incomplete frame."""

    __slots__ = ("_tail", "frame_max", "max_buffer")

    def __init__(self, frame_max: int, max_buffer: int) -> None:
        self.frame_max = frame_max
        self.max_buffer = max_buffer
        self._tail = _EMPTY  # the start of a frame not complete yet

    @property
    def buffered(self) -> int:
        return len(self._tail)

    def feed(self, data: bytes | bytearray | memoryview) -> tuple[bytes, list[int]]:
        """Add received bytes; return the frames they complete and their starts (plus the
        end of the last: bytes past it start a frame, kept for the next read).

        Raises ``errors.FrameError`` (501) for a bad frame and ``errors.ResourceError``
        (506) when more than ``max_buffer`` bytes stay unparsed; after an error the reader
        is unusable."""
        src = self._tail + data if self._tail else bytes(data)
        n = len(src)
        pos = 0
        starts: list[int] = []
        append = starts.append
        limit = self.frame_max - frames.FRAME_OVERHEAD
        unpack = _HEAD.unpack_from
        types = _TYPES
        while n - pos >= 7:
            ftype, channel, size = unpack(src, pos)
            if ftype not in types:
                raise errors.FrameError(f"unknown frame type {ftype}")
            if size > limit:
                raise errors.FrameError(
                    f"frame size {size + frames.FRAME_OVERHEAD} larger than frame_max "
                    f"{self.frame_max}"
                )
            end = pos + 7 + size
            if end >= n:
                break
            if src[end] != frames.FRAME_END:
                raise errors.FrameError(f"bad frame end octet 0x{src[end]:02x}")
            if ftype == frames.FRAME_HEARTBEAT and channel:
                raise errors.FrameError(f"heartbeat frame on channel {channel}")
            append(pos)
            pos = end + 1
        append(pos)
        if pos < n:
            if n - pos > self.max_buffer:
                raise errors.ResourceError(
                    f"{n - pos} unparsed bytes buffered, more than the limit of {self.max_buffer}"
                )
            self._tail = src[pos:]
        else:
            self._tail = _EMPTY
        return src, starts


def frames_of(src: bytes, starts: list[int], first: int, stop: int) -> list[tuple[int, bytes]]:
    """Frames ``first`` to ``stop`` (excluded) of a ``SpanReader.feed`` as (type, payload)."""
    return [(src[starts[i]], src[starts[i] + 7 : starts[i + 1] - 1]) for i in range(first, stop)]

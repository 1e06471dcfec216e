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
CLASS_CHANNEL: Final = b"\x00\x14"  # a method of class 20 starts with it

Run = tuple[int, int]


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

    def feed(self, data: bytes | bytearray | memoryview) -> tuple[bytes, list[int], list[Run]]:
        """Add received bytes; return the frames they complete, their starts (plus the end
        of the last: bytes past it start a frame, kept for the next read) and their runs.

        A run is ``(channel, first)``: frames ``first`` up to the next run's first, all on
        ``channel``; the list ends with ``(-1, count)``. A frame on channel 0 (connection
        methods, heartbeats) and a channel-class method (class 20: open-ok, close, flow)
        are runs of their own. Raises ``errors.FrameError`` (501) for a bad frame and
        ``errors.ResourceError`` (506) when more than ``max_buffer`` bytes stay unparsed;
        after an error the reader is unusable."""
        src = self._tail + data if self._tail else bytes(data)
        n = len(src)
        pos = 0
        starts: list[int] = []
        append = starts.append
        runs: list[Run] = []
        add_run = runs.append
        run_channel = -1
        limit = self.frame_max - frames.FRAME_OVERHEAD
        unpack = _HEAD.unpack_from
        types = _TYPES
        while n - pos >= 7:
            ftype, channel, size = unpack(src, pos)
            if ftype not in types or size > limit:
                raise _bad_head(ftype, size, self.frame_max)
            end = pos + 7 + size
            if end >= n:
                break
            if src[end] != frames.FRAME_END or (ftype == frames.FRAME_HEARTBEAT and channel):
                raise _bad_end(src[end], channel)
            if not channel or (ftype == 1 and src[pos + 7 : pos + 9] == CLASS_CHANNEL):
                add_run((channel, len(starts)))  # a run of its own
                run_channel = -1
            elif channel != run_channel:
                add_run((channel, len(starts)))
                run_channel = channel
            append(pos)
            pos = end + 1
        add_run((-1, len(starts)))
        append(pos)
        if pos < n:
            if n - pos > self.max_buffer:
                raise errors.ResourceError(
                    f"{n - pos} unparsed bytes buffered, more than the limit of {self.max_buffer}"
                )
            self._tail = src[pos:]
        else:
            self._tail = _EMPTY
        return src, starts, runs


def _bad_head(ftype: int, size: int, frame_max: int) -> errors.FrameError:
    if ftype not in _TYPES:
        return errors.FrameError(f"unknown frame type {ftype}")
    return errors.FrameError(
        f"frame size {size + frames.FRAME_OVERHEAD} larger than frame_max {frame_max}"
    )


def _bad_end(octet: int, channel: int) -> errors.FrameError:
    if octet != frames.FRAME_END:
        return errors.FrameError(f"bad frame end octet 0x{octet:02x}")
    return errors.FrameError(f"heartbeat frame on channel {channel}")


def frames_of(src: bytes, starts: list[int], first: int, stop: int) -> list[tuple[int, bytes]]:
    """Frames ``first`` to ``stop`` (excluded) of a ``SpanReader.feed`` as (type, payload)."""
    return [(src[starts[i]], src[starts[i] + 7 : starts[i + 1] - 1]) for i in range(first, stop)]

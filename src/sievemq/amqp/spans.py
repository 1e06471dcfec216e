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

A link reader also takes **relay frames** (``FRAME_RELAY``, never valid from a client): a
leader wraps a turn of deliveries for a link channel whose number and delivery tags are the
client's in them (``RELAY_HEAD``: the last delivery tag given on the channel so far, then the
frames exactly as the client gets them), so the relaying node writes the payload as it came,
without walking the deliveries (``gateway.session.peer.RelayChannel``).
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
_END: Final = bytes((frames.FRAME_END,))
CLASS_CHANNEL: Final = b"\x00\x14"  # a method of class 20 starts with it
FRAME_RELAY: Final = 12  # the link's own frame type: deliveries ready for the client
# frame type, channel, size; the last delivery tag given on the channel, and 1 when the
# turn's frames go on in the next relay frame (a turn larger than the link's frame_max)
RELAY_HEAD: Final = struct.Struct(">BHIQB")
RELAY_AT: Final = RELAY_HEAD.size  # where the client's frames start in a relay frame
RELAY_TARGET: Final = "\x00relay:"  # channel.open's target asking for relay frames,
# followed by the client's channel number (the number the frames inside carry)

Run = tuple[int, int]


class SpanReader:
    """Incremental frame splitter: bytes in, (whole frames, their starts) out.

    ``frame_max`` is the largest whole frame accepted (lower it after tuning);
    ``max_buffer`` caps the bytes held for an incomplete frame; ``relay``: relay frames
    are taken (the inter-node link's reader)."""

    __slots__ = ("_tail", "_types", "frame_max", "max_buffer")

    def __init__(self, frame_max: int, max_buffer: int, relay: bool = False) -> None:
        self.frame_max = frame_max
        self.max_buffer = max_buffer
        self._tail = _EMPTY  # the start of a frame not complete yet
        self._types = _TYPES | {FRAME_RELAY} if relay else _TYPES

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
        types = self._types
        while n - pos >= 7:
            ftype, channel, size = unpack(src, pos)
            if ftype not in types or size > limit:
                raise _bad_head(ftype, size, self.frame_max, types)
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


def _bad_head(ftype: int, size: int, frame_max: int, types: frozenset[int]) -> errors.FrameError:
    if ftype not in types:
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


def relay_frames(channel: int, data: bytes, last_tag: int, frame_max: int) -> list[bytes]:
    """A turn of deliveries (``data``: whole frames as the client gets them) as relay frames
    of at most ``frame_max`` bytes each."""
    room = frame_max - RELAY_AT - 1
    pack = RELAY_HEAD.pack
    size = len(data)
    if size <= room:
        return [pack(FRAME_RELAY, channel, size + RELAY_AT - 7, last_tag, 0), data, _END]
    out: list[bytes] = []
    for start in range(0, size, room):
        piece = data[start : start + room]
        more = 1 if start + room < size else 0
        out += (pack(FRAME_RELAY, channel, len(piece) + RELAY_AT - 7, last_tag, more), piece, _END)
    return out


def client_frames(data: bytes) -> list[tuple[int, bytes]]:
    """Whole frames (a relayed turn, joined) as (type, payload): the slow path, for a relay
    that cannot pass them on as they are."""
    out: list[tuple[int, bytes]] = []
    pos = 0
    n = len(data)
    unpack = _HEAD.unpack_from
    while pos < n:
        ftype, _, size = unpack(data, pos)
        out.append((ftype, data[pos + 7 : pos + 7 + size]))
        pos += 8 + size
    return out

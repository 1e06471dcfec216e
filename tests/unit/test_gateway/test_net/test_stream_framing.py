"""StreamProtocol.data_received cuts frames out of each read in place and keeps only a frame
cut by a read boundary: whatever the boundaries, the handler gets exactly the frames sent,
in order, and an oversized frame is reported whether or not its size arrived in one read."""

from __future__ import annotations

import random
import struct
from typing import Any

from sievemq.gateway.net.stream_protocol import StreamProtocol
from sievemq.streamproto import wire


class Recorder:
    read_control: Any = None

    def __init__(self) -> None:
        self.frames: list[tuple[int, int, bytes]] = []
        self.closed: list[tuple[int, str]] = []
        self.too_large: list[int] = []

    def on_open(self, transport: Any) -> None: ...

    def on_frames(self, frames: list[wire.Frame]) -> None:
        for f in frames:
            assert type(f.body) is bytes
            self.frames.append((f.key, f.version, f.body))

    def on_frame_too_large(self, size: int) -> None:
        self.too_large.append(size)

    def close(self, code: int, reason: str) -> None:
        self.closed.append((code, reason))

    def on_lost(self) -> None: ...
    def on_pause_writing(self) -> None: ...
    def on_resume_writing(self) -> None: ...


def _frame(key: int, version: int, body: bytes) -> bytes:
    return struct.pack(">IHH", len(body) + 4, key, version) + body


def _stream(rng: random.Random, n: int) -> tuple[bytes, list[tuple[int, int, bytes]]]:
    sent = []
    for i in range(n):
        body = bytes(rng.randrange(256) for _ in range(rng.choice((0, 1, 3, 50, 700))))
        sent.append((2 + i % 5, 1 + i % 2, body))
    return b"".join(_frame(*f) for f in sent), sent


def test_frames_survive_any_read_boundaries() -> None:
    rng = random.Random(7)
    data, sent = _stream(rng, 300)
    for max_read in (1, 2, 3, 5, 9, 64, 700, 4096, len(data)):
        rec = Recorder()
        protocol = StreamProtocol(rec, 1 << 20, 1 << 20)
        pos = 0
        while pos < len(data):
            step = rng.randint(1, max_read)
            protocol.data_received(data[pos : pos + step])
            pos += step
        assert rec.frames == sent, max_read
        assert not rec.closed and not rec.too_large


def test_a_read_of_several_whole_frames_and_a_tail() -> None:
    rec = Recorder()
    protocol = StreamProtocol(rec, 1 << 20, 1 << 20)
    one, two, three = _frame(2, 1, b"a" * 10), _frame(3, 2, b""), _frame(9, 1, b"xyz")
    protocol.data_received(one + two + three[:5])
    assert rec.frames == [(2, 1, b"a" * 10), (3, 2, b"")]
    protocol.data_received(three[5:] + one)
    assert rec.frames[2:] == [(9, 1, b"xyz"), (2, 1, b"a" * 10)]


def test_oversized_frame_is_reported_when_its_size_is_split_across_reads() -> None:
    for cut in (1, 2, 3, 4, 6):
        rec = Recorder()
        protocol = StreamProtocol(rec, 1000, 1 << 20)
        ok = _frame(2, 1, b"fine")
        big = struct.pack(">IHH", 5000, 2, 1) + b"x" * 20
        protocol.data_received(ok + big[:cut])
        if not rec.too_large:  # once reported, reading stops (the transport reads no more)
            protocol.data_received(big[cut:])
        assert rec.frames == [(2, 1, b"fine")]
        assert rec.too_large == [5000], cut


def test_a_frame_shorter_than_key_and_version_closes_with_unknown_frame() -> None:
    rec = Recorder()
    protocol = StreamProtocol(rec, 1000, 1 << 20)
    protocol.data_received(b"\x00\x00")
    protocol.data_received(b"\x00\x02\x00\x01")
    assert rec.closed and rec.closed[0][0] == wire.UNKNOWN_FRAME

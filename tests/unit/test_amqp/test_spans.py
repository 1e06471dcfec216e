"""SpanReader (the link's read path): the same frames and checks as FrameReader, as one bytes
object and the offsets of its frames, whatever the read boundaries."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sievemq.amqp import errors, frames
from sievemq.amqp.spans import SpanReader, frames_of
from tests.unit.test_amqp.test_frames import FRAME, encode


def read(reader: SpanReader, chunks: list[bytes]) -> list[tuple[int, int, bytes]]:
    """Every frame of the reads as (type, channel, payload), from the spans alone."""
    out = []
    for chunk in chunks:
        src, starts, _ = reader.feed(chunk)
        for i, (ftype, payload) in enumerate(frames_of(src, starts, 0, len(starts) - 1)):
            channel = struct.unpack_from(">H", src, starts[i] + 1)[0]
            assert src[starts[i] : starts[i + 1]] == encode(ftype, channel, payload)
            out.append((ftype, channel, payload))
    return out


@given(st.lists(FRAME, max_size=6), st.data())
def test_frames_split_anywhere_come_out_as_frame_reader_gives_them(frame_list, data) -> None:
    raw = b"".join(encode(*f) for f in frame_list)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=4)))
    chunks = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    reader = SpanReader(4096, 4096)
    assert read(reader, chunks) == frame_list
    assert read(reader, chunks) == frame_list  # nothing left over between rounds
    assert reader.buffered == 0
    assert frames.FrameReader(4096, 4096).feed(raw) == frame_list


def test_runs_group_one_channels_frames_and_isolate_connection_and_channel_methods() -> None:
    channel_close_ok = b"\x00\x14\x00\x29"
    raw = b"".join(
        [
            encode(1, 5, b"\x00\x3c\x00\x3c"),  # 0: a delivery on 5
            encode(2, 5, b"h"),
            encode(3, 5, b"b"),
            encode(8, 0, b""),  # 3: a heartbeat
            encode(3, 5, b"b"),  # 4: 5 again
            encode(1, 6, b"\x00\x3c\x00\x50"),  # 5: an ack on 6
            encode(1, 6, channel_close_ok),  # 6: a channel method: its own run
            encode(1, 6, b"\x00\x3c\x00\x50"),  # 7
            encode(1, 0, b"\x00\x0a\x00\x32"),  # 8: connection.close
            encode(1, 0, b"\x00\x0a\x00\x33"),  # 9: each connection frame alone
        ]
    )
    for cut in range(len(raw) + 1):
        reader = SpanReader(4096, 4096)
        got = []
        for chunk in (raw[:cut], raw[cut:]):
            src, starts, runs = reader.feed(chunk)
            assert runs[-1] == (-1, len(starts) - 1)
            got += [
                (number, frames_of(src, starts, first, runs[k + 1][1]))
                for k, (number, first) in enumerate(runs[:-1])
            ]
        whole = SpanReader(4096, 4096).feed(raw)[2]
        assert whole == [(5, 0), (0, 3), (5, 4), (6, 5), (6, 6), (6, 7), (0, 8), (0, 9), (-1, 10)]
        assert [f for _, run in got for f in run] == [
            (t, p) for t, _, p in frames.FrameReader(4096, 4096).feed(raw)
        ]


def test_an_incomplete_frame_is_kept_and_its_bytes_are_past_the_last_start() -> None:
    reader = SpanReader(4096, 4096)
    whole, part = encode(1, 3, b"abcd"), encode(3, 3, b"xyz")
    src, starts, _ = reader.feed(whole + part[:5])
    assert starts == [0, len(whole)] and src[: starts[-1]] == whole
    assert reader.buffered == 5
    src, starts, _ = reader.feed(part[5:])
    assert starts == [0, len(part)] and src == part and reader.buffered == 0


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (encode(9, 1, b""), errors.FrameError),  # unknown type
        (encode(3, 1, b"x" * 5000), errors.FrameError),  # over frame_max
        (encode(3, 1, b"x")[:-1] + b"\x00", errors.FrameError),  # bad frame end
        (encode(8, 1, b""), errors.FrameError),  # heartbeat off channel 0
    ],
)
def test_bad_frames_are_refused_as_frame_reader_refuses_them(raw: bytes, error: type) -> None:
    with pytest.raises(error):
        SpanReader(4096, 1 << 20).feed(raw)
    with pytest.raises(error):
        frames.FrameReader(4096, 1 << 20).feed(raw)


def test_more_unparsed_bytes_than_the_buffer_allows_is_a_resource_error() -> None:
    reader = SpanReader(4096, 100)
    with pytest.raises(errors.ResourceError):
        reader.feed(encode(3, 1, b"x" * 500)[:200])

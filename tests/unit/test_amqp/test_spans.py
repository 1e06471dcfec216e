"""SpanReader (the link's read path): the same frames and checks as FrameReader, as one bytes
object and the offsets of its frames, whatever the read boundaries."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sievemq.amqp import errors, frames
from sievemq.amqp.spans import SpanReader, frames_of

FRAME = st.tuples(
    st.sampled_from([frames.FRAME_METHOD, frames.FRAME_HEADER, frames.FRAME_BODY]),
    st.integers(1, 65535),
    st.binary(max_size=200),
) | st.just((frames.FRAME_HEARTBEAT, 0, b""))


def encode(frame_type: int, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + b"\xce"


def read(reader: SpanReader, chunks: list[bytes]) -> list[tuple[int, int, bytes]]:
    """Every frame of the reads as (type, channel, payload), from the spans alone."""
    out = []
    for chunk in chunks:
        src, starts = reader.feed(chunk)
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


def test_an_incomplete_frame_is_kept_and_its_bytes_are_past_the_last_start() -> None:
    reader = SpanReader(4096, 4096)
    whole, part = encode(1, 3, b"abcd"), encode(3, 3, b"xyz")
    src, starts = reader.feed(whole + part[:5])
    assert starts == [0, len(whole)] and src[: starts[-1]] == whole
    assert reader.buffered == 5
    src, starts = reader.feed(part[5:])
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
